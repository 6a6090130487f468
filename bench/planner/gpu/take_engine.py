#!/usr/bin/python3
"""Give a cluster description the GEMM engine fitted for another one on the same silicon: the tiles, the fixed
cost per tile, the alignment levels and the sustained matrix rate of its bf16 and f16 tables, and the per-op
efficiency of the memory-bound kernels measured (`op_efficiency` of its bf16, f16 and f32 tables: each a ratio to
the measured card's own streaming rate), each with the source the fit wrote. The rest of the description (its peaks, memory, network, attention and comments) stays as it is.
Grand Teton's 500 W H100 takes the engine `strata fit-device` fits to the 700 W H100 SXM's kernels (dgx-h100.toml):
fitting those kernels against its HBM2e would price their memory-bound part on the wrong bandwidth.

    take_engine.py FITTED TARGET [--scale-sustained] [--check]

--scale-sustained: TARGET's matrix peak differs from FITTED's (a part held to another power limit): its sustained
rate is FITTED's share of FITTED's peak applied to TARGET's, recorded as an assumption.
--check: write nothing; exit 1, naming the figures, when TARGET does not hold FITTED's engine (CTest runs this on
the shipped presets, so that a new fit is not left behind in one of them).
Python 3 standard library only.
"""
import argparse
import tomllib

DTYPES = ("bf16", "f16")
ENGINE = ("gemm_tiles", "gemm_tile_overhead_us", "gemm_alignment")
SUSTAINED = "sustained_matrix_tflops"
OP_DTYPES = ("bf16", "f16", "f32")
OP_EFFICIENCY = "op_efficiency"


def toml_value(value):
    if isinstance(value, list):
        return "[ " + ", ".join(toml_value(v) for v in value) + " ]"
    return repr(value)


def toml_string(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def figure_line(key, value, source):
    return f"    {key} = {{ value = {toml_value(value)}, source = {toml_string(source)} }}"


def figures_for(fitted, target, fitted_path, scale_sustained):
    """The lines to write, by dtype table and key."""
    lines = {}
    for dtype in DTYPES:
        source_table, target_table = fitted["device"][dtype], target["device"][dtype]
        lines[dtype] = {key: figure_line(key, source_table[key]["value"], source_table[key]["source"]) for key in ENGINE}
        if SUSTAINED not in source_table:
            continue
        sustained = source_table[SUSTAINED]
        if not scale_sustained:
            lines[dtype][SUSTAINED] = figure_line(SUSTAINED, sustained["value"], sustained["source"])
            continue
        peak, own_peak = source_table["matrix_tflops"]["value"], target_table["matrix_tflops"]["value"]
        share = sustained["value"] / peak
        lines[dtype][SUSTAINED] = figure_line(
            SUSTAINED, round(share * own_peak, 1),
            f"assumption: the share of the matrix peak {fitted_path} sustains at its power limit "
            f"({sustained['value']:.1f} of {peak:g} TFLOP/s, {share:.4f}; {sustained['source']}) applied to this "
            f"part's {own_peak:g}")
    for dtype in OP_DTYPES:
        ops = fitted["device"][dtype].get(OP_EFFICIENCY, {})
        if ops:
            lines[f"{dtype}.{OP_EFFICIENCY}"] = {op: figure_line(op, f["value"], f["source"]) for op, f in ops.items()}
    return lines


def rewrite(text, lines, target):
    """TARGET's text with each figure's entry (one line, or a multi-line array) replaced; a sustained rate the target
    lacks goes after its matrix peak."""
    out, table, rows, i = [], None, text.split("\n"), 0
    while i < len(rows):
        row, stripped = rows[i], rows[i].strip()
        if stripped.startswith("[") and stripped.endswith("]") and "=" not in stripped:
            table = stripped[1:-1].removeprefix("device.")
        key = stripped.split(" = ")[0] if " = " in stripped else None
        wanted = lines.get(table, {})
        if key in wanted:
            end = i
            if row.rstrip().endswith("["):
                while rows[end].strip() != "] }":
                    end += 1
            out.append(wanted.pop(key))
            i = end + 1
            continue
        out.append(row)
        if key == "matrix_tflops" and SUSTAINED in wanted and SUSTAINED not in target["device"][table]:
            out.append(wanted.pop(SUSTAINED))
        i += 1
    # An op_efficiency table the target lacks goes at the end (a TOML table may follow any other).
    for table in [t for t, k in lines.items() if k and t.endswith(OP_EFFICIENCY)]:
        while out and not out[-1].strip():
            out.pop()
        out += ["", f"[device.{table}]", *lines.pop(table).values()]
    left = {t: list(k) for t, k in lines.items() if k}
    if left:
        raise SystemExit(f"figures not placed in the target: {left}")
    return "\n".join(out).rstrip("\n") + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fitted")
    parser.add_argument("target")
    parser.add_argument("--scale-sustained", action="store_true")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    with open(args.fitted, "rb") as f:
        fitted = tomllib.load(f)
    with open(args.target, "rb") as f:
        target = tomllib.load(f)
    with open(args.target) as f:
        text = f.read()
    result = rewrite(text, figures_for(fitted, target, args.fitted, args.scale_sustained), target)
    taken = tomllib.loads(result)  # still a valid description
    if args.check:
        stale = [f"[device.{dtype}] {key}" for dtype in DTYPES for key in (*ENGINE, SUSTAINED)
                 if taken["device"][dtype].get(key) != target["device"][dtype].get(key)]
        stale += [f"[device.{dtype}.{OP_EFFICIENCY}]" for dtype in OP_DTYPES
                  if taken["device"][dtype].get(OP_EFFICIENCY) != target["device"][dtype].get(OP_EFFICIENCY)]
        if stale:
            raise SystemExit(f"{args.target} does not hold {args.fitted}'s engine: {', '.join(stale)} differ "
                             f"(run bench/planner/gpu/take_engine.py {args.fitted} {args.target}"
                             f"{' --scale-sustained' if args.scale_sustained else ''})")
        return
    with open(args.target, "w") as f:
        f.write(result)


if __name__ == "__main__":
    main()
