# SPDX-License-Identifier: Apache-2.0
"""Records how it was run: <out>/args.<RANK> holds sys.argv[1:] and __name__, one per line.
Usage: python -m tr_args OUT [ARGS...] or tr_args.py OUT [ARGS...]"""
import os
import sys

with open(os.path.join(sys.argv[1], "args." + os.environ["RANK"]), "w") as f:
    f.write("\n".join([__name__, *sys.argv[2:]]) + "\n")
