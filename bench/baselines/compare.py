#!/usr/bin/env python3
"""Compares a tide_bench run against a baseline: one line per row the two share, with each figure's ratio.

    python3 bench/baselines/compare.py BASELINE.json NEW.json [--tolerance 0.05] [--by-fraction]

Both files are tide_bench's JSON object (`tide_bench ... --out NEW.json`, or gpu-out/bench.json from
tools/gpu/check.sh); the baselines in this folder hold the figures of docs/PERFORMANCE.md in that format, each row
naming the date, commit and GPU it was measured on (details.recorded). Rows are matched by section, label and shape.

A ratio above 1 is better (faster, more tokens or bytes or FLOPs per second): new / baseline for rates, baseline /
new for times. A row is flagged REGRESSION when a ratio falls below 1 - tolerance. The read ceiling moves by up to
10% from one H200 to another, so milliseconds from different machines differ by that much with no code change:
--by-fraction compares the fraction of the same run's ceiling instead, where both runs report one.

Exit status: 0 when nothing regressed, 1 when a row did, 2 for bad input. Python 3 standard library only.
"""
import argparse
import json
import sys

# (key in a row, name printed, higher is better)
FIGURES = [
    ("time_ms", "ms", False),
    ("tok_per_s", "tok/s", True),
    ("bytes_per_s", "GB/s", True),
    ("flops_per_s", "TFLOP/s", True),
]
SCALE = {"ms": 1.0, "tok/s": 1.0, "GB/s": 1e-9, "TFLOP/s": 1e-12}


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"compare.py: cannot read {path}: {e}")
    if not isinstance(report, dict) or not isinstance(report.get("rows"), list):
        raise SystemExit(f"compare.py: {path} is not a tide_bench JSON object (no 'rows' list)")
    return report


def key(row):
    return (row.get("section", ""), row.get("what", ""), row.get("shape", ""))


def ratio(base, new, higher_is_better):
    if base is None or new is None or base <= 0 or new <= 0:
        return None
    return new / base if higher_is_better else base / new


def describe(report):
    device = report.get("device", {}) or {}
    parts = [str(report.get("model", "?")), "fp8" if report.get("fp8") else "bf16"]
    if report.get("fp8_kv"):
        parts.append("fp8 KV")
    parts.append(str(device.get("name", "unknown GPU")))
    recorded = (report.get("baseline") or {}).get("about")
    return ", ".join(parts) + (f" ({recorded})" if recorded else "")


def compare(base, new, tolerance, by_fraction, out=sys.stdout):
    """Prints the comparison; returns (rows compared, rows regressed, baseline rows not in the new run)."""
    new_rows = {}
    for row in new["rows"]:
        new_rows.setdefault(key(row), row)
    print(f"baseline: {describe(base)}", file=out)
    print(f"new:      {describe(new)}", file=out)
    for name, value in sorted((base.get("ceilings") or {}).items()):
        other = (new.get("ceilings") or {}).get(name)
        r = ratio(value, other, True)
        if r is not None:
            print(f"ceiling {name}: {value:.4g} -> {other:.4g} ({r:.3f}x)", file=out)
    print(f"{'row':<58} {'figure':<8} {'baseline':>10} {'new':>10} {'ratio':>7}", file=out)
    compared = regressed = 0
    missing = []
    for row in base["rows"]:
        if row.get("section") == "ceiling":
            continue
        other = new_rows.get(key(row))
        label = f"{row.get('what', '')} [{row.get('shape', '')}]"
        if other is None:
            missing.append(label)
            continue
        if other.get("note"):
            print(f"{label:<58} {other['note']}", file=out)
            continue
        figures = [("fraction_of_ceiling", "% ceil", True)] if by_fraction else FIGURES
        lines = []
        for field, unit, higher in figures:
            r = ratio(row.get(field), other.get(field), higher)
            if r is None:
                continue
            scale = 100.0 if field == "fraction_of_ceiling" else SCALE[unit]
            flag = "  REGRESSION" if r < 1.0 - tolerance else ""
            lines.append((unit, row[field] * scale, other[field] * scale, r, flag))
        if not lines:
            continue
        compared += 1
        if any(flag for *_, flag in lines):
            regressed += 1
        for i, (unit, b, n, r, flag) in enumerate(lines):
            print(f"{label if i == 0 else '':<58} {unit:<8} {b:>10.4g} {n:>10.4g} {r:>6.3f}x{flag}", file=out)
    print(f"{compared} rows compared, {regressed} beyond the {tolerance:.0%} tolerance", file=out)
    if missing:
        print(f"{len(missing)} baseline rows not in the new run: " + "; ".join(missing), file=out)
    return compared, regressed, missing


def main(argv=None):
    parser = argparse.ArgumentParser(description="Compare a tide_bench JSON run against a baseline.")
    parser.add_argument("baseline")
    parser.add_argument("new")
    parser.add_argument("--tolerance", type=float, default=0.05,
                        help="flag a row whose ratio is below 1 - TOLERANCE (default 0.05)")
    parser.add_argument("--by-fraction", action="store_true",
                        help="compare the fraction of each run's own ceiling instead of absolute figures")
    args = parser.parse_args(argv)
    if not 0 <= args.tolerance < 1:
        parser.error("--tolerance must be in [0, 1)")
    try:
        base, new = load(args.baseline), load(args.new)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    _, regressed, _ = compare(base, new, args.tolerance, args.by_fraction)
    return 1 if regressed else 0


if __name__ == "__main__":
    sys.exit(main())
