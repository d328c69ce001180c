"""Summaries of Nsight Compute reports exported as text, side by side (tools/gpu/attention_profile.sh writes them).

  ncu_summary.py details A.txt B.txt ...   # `ncu -i R --page details --print-details all`: one column per kernel
  ncu_summary.py sass A.csv B.csv ...      # `ncu -i R --page source --csv --print-source sass`: instruction mix

`details` prints the figures that say where a kernel's cycles go (elapsed and active cycles, the tensor pipe's
share, instructions, issue slots, the top warp stalls, shared memory). `sass` prints, per kernel, the executed
warp instructions by opcode and the stall samples they drew, and the loop bodies by how often their instructions
ran (a producer's per-tile loop and a consumer's show up as two execution counts; a polling loop as a third).
"""
import collections
import csv
import re
import sys

DETAILS = [
    ("Duration", "Duration"),
    ("SM Frequency", "SM Frequency"),
    ("Elapsed Cycles", "Elapsed Cycles"),
    ("SM Active Cycles", "SM Active Cycles"),
    ("tensor pipe active, % of elapsed", "SM: Pipe Tensor Cycles Active"),
    ("issue slots busy, %", "Issue Slots Busy"),
    ("instructions executed", "Instructions Executed"),
    ("warp cycles per issued instruction", "Warp Cycles Per Issued Instruction"),
    ("eligible warps per scheduler", "Eligible Warps Per Scheduler"),
    ("stall: barrier", "Stall Barrier"),
    ("stall: wait (fixed latency)", "Stall Wait"),
    ("stall: long scoreboard", "Stall Long Scoreboard"),
    ("stall: dispatch", "Stall Dispatch Stall"),
    ("stall: not selected", "Stall Not Selected"),
    ("stall: MIO throttle", "Stall MIO Throttle"),
    ("registers per thread", "Registers Per Thread"),
    ("dynamic shared memory per block, KB", "Dynamic Shared Memory Per Block"),
]
LINE = re.compile(r"^\s+(\S.*?)\s{2,}(\S+\s+)?([-\d][\d,.]*)\s*$")


def details(paths):
    columns = []
    for path in paths:
        values, name = {}, path
        with open(path, errors="replace") as f:
            for line in f:
                if name == path and re.search(r"\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)", line):
                    name = line.strip().split(" (")[0].split("::")[-1]
                m = LINE.match(line)
                if m and m.group(1) not in values:
                    values[m.group(1)] = m.group(3)
        columns.append((name, values))
    print(f"{'':40s}" + "".join(f"{n[:28]:>30s}" for n, _ in columns))
    for label, key in DETAILS:
        print(f"{label:40s}" + "".join(f"{v.get(key, '-'):>30s}" for _, v in columns))


def sass(paths):
    for path in paths:
        with open(path, errors="replace") as f:
            rows = list(csv.reader(f))
        header = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
        if header is None:
            print(f"== {path}: no source page here (no \"Address\" header row): was the report exported?")
            continue
        names = {h: i for i, h in enumerate(rows[header])}
        executed, samples = names["Instructions Executed"], names["Warp Stall Sampling (All Samples)"]
        by_op, samples_by_op, by_count = collections.Counter(), collections.Counter(), collections.Counter()
        lines_by_count = collections.Counter()
        total = total_samples = 0
        for r in rows[header + 1:]:
            if len(r) <= max(executed, samples):
                continue
            n, s = int(r[executed] or 0), int(r[samples] or 0)
            words = r[1].split()
            op = (words[1] if words and words[0].startswith("@") and len(words) > 1 else (words or [""])[0]).split(".")[0]
            by_op[op] += n
            samples_by_op[op] += s
            total += n
            total_samples += s
            if n:
                by_count[round(n, -4)] += n
                lines_by_count[round(n, -4)] += 1
        print(f"== {path}: {total / 1e6:.1f} M warp instructions executed, {total_samples} stall samples")
        for op, n in by_op.most_common(20):
            share = 100 * samples_by_op[op] / max(total_samples, 1)
            print(f"  {op:12s} {n / 1e6:8.2f} M {100 * n / total:5.1f}%   samples {share:5.1f}%")
        print("  instructions by how often they ran (loop bodies):")
        for count, n in by_count.most_common(6):
            print(f"  ~{count / 1e3:9.0f} K times: {lines_by_count[count]:5d} instructions, {100 * n / total:5.1f}% of all")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("details", "sass"):
        sys.exit(__doc__)
    (details if sys.argv[1] == "details" else sass)(sys.argv[2:])
