"""``python -m rlt.models params``: the parameter table of the report's configurations."""

from __future__ import annotations

import argparse

from rlt.models.build import PAPER, format_parameter_table, parameter_rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rlt.models", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    params = sub.add_parser("params", help="parameter counts (paper config by default)")
    for name, default in PAPER.items():
        params.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    args = parser.parse_args(argv)
    sizes = {name: getattr(args, name) for name in PAPER}
    bad = [f"--{k.replace('_', '-')}" for k, v in sizes.items() if v < 1]
    if bad:
        parser.error(f"{', '.join(bad)} must be >= 1")
    if sizes["d_model"] % sizes["n_heads"]:
        parser.error(f"--n-heads ({sizes['n_heads']}) must divide --d-model ({sizes['d_model']})")
    print(
        f"d_model={sizes['d_model']} n_heads={sizes['n_heads']} d_ff={sizes['d_ff']} "
        f"vocab_size={sizes['vocab_size']}; untied embedding and head; RLT-2 has RLT-1's parameters"
    )
    print(format_parameter_table(parameter_rows(**sizes)))


if __name__ == "__main__":
    main()
