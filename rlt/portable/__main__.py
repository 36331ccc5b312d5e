"""``python -m rlt.portable --check [--quick]``: does this host reproduce portable arithmetic's
references (rlt/portable/check.py)? ``--write-ops`` remakes the kernels' reference."""

import argparse
import sys

from rlt.portable import check

parser = argparse.ArgumentParser(prog="python -m rlt.portable", description=__doc__)
mode = parser.add_mutually_exclusive_group(required=True)
mode.add_argument("--check", action="store_true", help="compare this host with the references")
mode.add_argument(
    "--write-ops", action="store_true", help="remake tests/reference/portable_ops.json"
)
parser.add_argument("--quick", action="store_true", help="with --check: skip the 200-step run")
args = parser.parse_args()
if args.write_ops:
    print(f"wrote {check.write_ops_reference()}")
    sys.exit(0)
try:
    sys.exit(check.check(quick=args.quick))
except RuntimeError as e:  # a reference run or the kernels could not run here
    print(f"cannot check: {e}".splitlines()[0], file=sys.stderr)
    sys.exit(2)
