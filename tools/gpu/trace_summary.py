#!/usr/bin/env python3
"""Reads a kernel timeline written by `tide_bench --trace PREFIX` (PREFIX-B<batch>-C<context>.csv) and prints
one decode step of it: each kernel's stream, start and end (microseconds from the step's first kernel), and
how long after the previous kernel of its stream it ended; then the time per kernel kind over the step.

    tools/gpu/trace_summary.py trace-B1-C1024.csv [--step N] [--rows N]

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
    args = parser.parse_args()
    rows = list(csv.DictReader(open(args.csv, newline='')))
    for r in rows:
        for k in ('stream', 'start_ns', 'end_ns', 'grid'):
            r[k] = int(r[k])
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
    total = defaultdict(lambda: [0, 0.0])
    for r in step:
        t = total[kind(r['name'], r['grid'])]
        t[0] += 1
        t[1] += (r['end_ns'] - r['start_ns']) / 1e3
    print(f'\n{"kernel":<36} {"count":>5} {"us (start to end)":>18}')
    for name, (count, us) in sorted(total.items(), key=lambda kv: -kv[1][1]):
        print(f'{name[:36]:<36} {count:5d} {us:18.1f}')


if __name__ == '__main__':
    main()
