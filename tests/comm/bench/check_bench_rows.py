#!/usr/bin/python3
"""Checks a `comm-bench --json` report of a run with --check-cost and --breakdown: every algorithm and baseline
named has a row at every size, each with no wrong element, a positive time, and (for Strata's algorithms) the
unchecked twin and the per-call phases.

    check_bench_rows.py REPORT.json ALGORITHM[,ALGORITHM...]
"""
import json
import sys


def main():
    report, names = json.load(open(sys.argv[1])), sys.argv[2].split(",")
    rows = report["rows"]
    sizes = sorted({row["bytes"] for row in rows})
    problems = []
    if len(sizes) < 2:
        problems.append(f"expected several sizes, got {sizes}")
    for size in sizes:
        for name in names:
            baseline = name.startswith("baseline")
            for unchecked in ([False] if baseline else [False, True]):
                found = [r for r in rows if r["bytes"] == size and r["algorithm"] == name
                         and r.get("call_check", True) != unchecked]
                what = f"{name}{' unchecked' if unchecked else ''} at {size} B"
                if len(found) != 1:
                    problems.append(f"{what}: {len(found)} rows")
                    continue
                row = found[0]
                if row["wrong"] != 0:
                    problems.append(f"{what}: {row['wrong']} wrong elements")
                if not row["time_us"] > 0:
                    problems.append(f"{what}: time {row['time_us']}")
                if not baseline and not row.get("phases_us"):
                    problems.append(f"{what}: no per-call phases")
    for problem in problems:
        print(problem)
    print(f"{len(rows)} rows, {len(sizes)} sizes, {len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
