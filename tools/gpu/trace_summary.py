#!/usr/bin/env python3
"""Reads a kernel timeline written by `tide_bench --trace PREFIX` (PREFIX-B<batch>-C<context>.csv) and prints
one decode step of it: each kernel's stream, start and end (microseconds from the step's first kernel), and
how long after the previous kernel of its stream it ended; then the time per kernel kind over the step.

    tools/gpu/trace_summary.py trace-B1-C1024.csv [--step N] [--rows N]
    tools/gpu/trace_summary.py --whole trace-prefill-8192.csv

--whole: no steps: the time per kernel kind over the whole file (a prefill point's one prompt), with the span
from the first kernel's start to the last one's end and how much of it no kernel ran.

Steps are told apart by the logits matmul (the step's last cuBLASLt kernel, `nvjet...` or `sm90_xmma...`).
CUPTI's start is when a kernel's first CTA began: a kernel launched early (programmatic dependent launch)
starts while its predecessor still runs, so read the end times, not the durations, for the serial path.
"""
import argparse
import csv
import sys
from collections import defaultdict


def kind(name, grid):
    base = name.split('<')[0].split('::')[-1]
    return f'{base}[{grid}]' if 'matmul' in base else base


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('csv')
    parser.add_argument('--step', type=int, default=1, help='which traced step (0-based; default 1)')
    parser.add_argument('--rows', type=int, default=80, help='kernels of the timeline to print')
    parser.add_argument('--whole', action='store_true', help='the whole file, by kernel kind (prefill traces)')
    args = parser.parse_args()
    rows = list(csv.DictReader(open(args.csv, newline='')))
    for r in rows:
        for k in ('stream', 'start_ns', 'end_ns', 'grid'):
            r[k] = int(r[k])
    if args.whole:
        whole(rows)
        return
    ends = [i for i, r in enumerate(rows) if r['name'].startswith(('nvjet', 'sm90_xmma'))]
    if len(ends) <= args.step:
        sys.exit(f'{args.csv}: {len(ends)} steps traced, no step {args.step}')
    step = rows[ends[args.step - 1] + 1 if args.step > 0 else 0:ends[args.step] + 1]
    t0 = step[0]['start_ns']
    streams = sorted({r['stream'] for r in step})
    print(f'step {args.step}: {len(step)} kernels, {(step[-1]["end_ns"] - t0) / 1e3:.1f} us, streams {streams}')
    print(f'{"stream":>6} {"kernel":<36} {"start":>8} {"end":>8} {"after prev":>10}')
    last_end = {}
    for r in step[:args.rows]:
        start, end = (r['start_ns'] - t0) / 1e3, (r['end_ns'] - t0) / 1e3
        prev = last_end.get(r['stream'])
        after = f'{end - prev:10.2f}' if prev is not None else ' ' * 10
        last_end[r['stream']] = end
        print(f'{r["stream"]:>6} {kind(r["name"], r["grid"])[:36]:<36} {start:8.2f} {end:8.2f} {after}')
    print()
    by_kind(step)


def by_kind(rows):
    """Prints the kernels' count and summed start-to-end time per kernel kind, largest first."""
    total = defaultdict(lambda: [0, 0.0])
    for r in rows:
        t = total[kind(r['name'], r['grid'])]
        t[0] += 1
        t[1] += (r['end_ns'] - r['start_ns']) / 1e3
    print(f'{"kernel":<36} {"count":>5} {"us (start to end)":>18}')
    for name, (count, us) in sorted(total.items(), key=lambda kv: -kv[1][1]):
        print(f'{name[:36]:<36} {count:5d} {us:18.1f}')


def whole(rows):
    """The whole file: its span, the time in it when no kernel ran, and the time per kernel kind."""
    if not rows:
        sys.exit('no kernels in the file')
    rows = sorted(rows, key=lambda r: r['start_ns'])
    busy, reach = 0, rows[0]['start_ns']
    for r in rows:  # the union of the kernels' intervals
        if r['end_ns'] > reach:
            busy += r['end_ns'] - max(r['start_ns'], reach)
            reach = r['end_ns']
    span = max(r['end_ns'] for r in rows) - rows[0]['start_ns']
    print(f'{len(rows)} kernels over {span / 1e3:.1f} us, {(span - busy) / 1e3:.1f} us of it with no kernel running')
    by_kind(rows)


if __name__ == '__main__':
    main()
