# SPDX-License-Identifier: Apache-2.0
"""A torch.distributed.launch-era script: fails unless given --local_rank (or --local-rank with
--dash), as fairseq-era scripts do. Writes <out>/launch.<RANK> with the local rank it was given.
Usage: tr_launch.py [--local_rank=N | --local-rank=N] OUT_DIR [--dash]"""
import argparse
import os

p = argparse.ArgumentParser()
p.add_argument("--local_rank", "--local-rank", type=int, required=True, dest="local_rank")
p.add_argument("out")
p.add_argument("--flag", default="")
a = p.parse_args()
assert a.local_rank == int(os.environ["LOCAL_RANK"]), "the argument and LOCAL_RANK agree"
with open(os.path.join(a.out, "launch." + os.environ["RANK"]), "w") as f:
    f.write(f"{a.local_rank} {a.flag}\n")
