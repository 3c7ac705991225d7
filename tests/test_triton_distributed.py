"""Ranks of a torch.distributed job agree on one configuration: rank 0 decides, the
others measure nothing (two real processes over gloo, under TRITON_INTERPRET=1)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_triton_kernels import interpret, torch  # noqa: F401 - skips without torch/triton

from tensortune.frontends.triton.distributed import AgreementError, agree
from tensortune.space import Config

TESTS = Path(__file__).parent

RANK = textwrap.dedent(f"""
    import json, os, sys
    sys.path.insert(0, {str(TESTS)!r})
    import torch.distributed as dist
    import test_triton_kernels as K
    import tensortune as tt
    from test_triton_kernels import torch, triton

    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=2)

    class Timer:  # each rank alone would choose differently: rank 0 BLOCK 64, rank 1 BLOCK 16
        calls = 0
        def time(self, fn):
            Timer.calls += 1
            fn()
            return (abs(fn.config["BLOCK"] - (64 if rank == 0 else 16)) + 1.0,)

    k = tt.autotune(configs=[triton.Config({{"BLOCK": b}}) for b in (16, 32, 64)], key=["n"], timer=Timer(),
                    settings=tt.Settings(db_path=os.environ["DB"], progress=False))(K.scale_inplace_kernel)
    x = torch.randn(100)
    want = x * 2
    k[lambda m: (triton.cdiv(100, m["BLOCK"]),)](x, 100, 2.0)
    (d,) = k.decisions().values()
    print(json.dumps({{"rank": rank, "calls": Timer.calls, "block": d.config["BLOCK"], "source": d.source,
                      "ok": bool(torch.equal(x, want))}}))
    dist.destroy_process_group()
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_ranks_agree_and_only_rank_0_measures(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    port = str(_free_port())
    procs = []
    for rank in (0, 1):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": port, "TRITON_INTERPRET": "1", "DB": str(tmp_path / f"rank{rank}.db")}
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    results = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    r0, r1 = sorted(results, key=lambda r: r["rank"])
    assert r0["calls"] >= 3 and r1["calls"] == 0
    assert r0["block"] == r1["block"] == 64
    assert (r0["source"], r1["source"]) == ("tuned", "agreed") and r0["ok"] and r1["ok"]


def test_a_failure_on_rank_0_is_raised_on_every_rank():
    sent = []

    def broadcast(box, src):
        sent.append(box[0])

    def fails():
        raise RuntimeError("no configuration ran")

    with pytest.raises(RuntimeError, match="no configuration ran"):
        agree(fails, "broadcast", broadcast=broadcast, rank=0)
    assert sent[0][0] == "error"

    def receive(box, src):
        box[0] = sent[0]

    with pytest.raises(AgreementError, match="rank 0 failed.*no configuration ran"):
        agree(fails, "broadcast", broadcast=receive, rank=1)
    box_ok = ("ok", Config(BLOCK=32).to_json(), "tuned")
    assert agree(fails, "broadcast", broadcast=lambda box, src: box.__setitem__(0, box_ok), rank=1) == (
        Config(BLOCK=32), "agreed")
