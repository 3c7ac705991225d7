"""Whole models compiled for the GPU target, run in Triton's interpreter on the CPU.

The same code paths as on a GPU (the Triton kernels generated for every task, the fused
attention, the shared GPU worker and the plan), with times that mean nothing. It runs in
a subprocess so that TRITON_INTERPRET=1 is set before Triton is imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")
pytest.importorskip("transformers")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = r"""
import json, sys, torch, tensortune
from transformers import GPT2Config, GPT2Model, LlamaConfig, LlamaModel
torch.manual_seed(0)
models = {
    "gpt2": (GPT2Model(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16, use_cache=False)),
             lambda: [torch.randint(0, 64, (1, 8))]),
    "llama": (LlamaModel(LlamaConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                     num_key_value_heads=2, vocab_size=64, use_cache=False)).to(torch.bfloat16),
              lambda: [torch.randint(0, 64, (1, 8))]),
}
out = {}
for name, (model, make) in models.items():
    model.eval()
    fast = tensortune.compile(model, make(), target="cuda", budget=1, db=sys.argv[1], progress=False)
    x = make()
    with torch.no_grad():
        got, want = fast(*x).last_hidden_state.float(), model(*x).last_hidden_state.float()
    out[name] = {"error": float((got - want).norm() / want.norm()), "labels": [t.label for t in fast.report.tasks],
                 "sources": [t.source for t in fast.report.tasks], "fallbacks": len(fast.report.fallbacks)}
from tensortune.db import Database
db = Database(sys.argv[1])
gemv = [r for wl, _, _ in db.workloads() for r in db.records(wl) if r.config.get("GEMV")]
print(json.dumps({"models": out, "gemv": {"ok": sum(r.ok for r in gemv), "failed": sum(not r.ok for r in gemv)}}))
"""


@pytest.mark.slow
def test_models_compile_for_the_gpu_target_in_the_interpreter(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.path.join(ROOT, "src"), "TENSORTUNE_PROGRESS": "0"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "r.db")], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    everything = json.loads(done.stdout.strip().splitlines()[-1])
    result = everything["models"]
    # 8 tokens: every projection has 8 rows, so its first candidate is the matrix-vector kernel
    assert everything["gemv"]["ok"] > 0 and everything["gemv"]["failed"] == 0, everything["gemv"]
    for name, r in result.items():
        assert r["fallbacks"] == 0 and set(r["sources"]) == {"tuned"}, (name, r)
        assert any(label.startswith("attention") for label in r["labels"]), (name, r["labels"])  # one fused kernel
    assert result["gpt2"]["error"] < 1e-4
    assert result["llama"]["error"] < 4e-2  # bfloat16


CNN_SCRIPT = r"""
import json, sys, torch, tensortune
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Conv2d(8, 8, 3, padding=1, groups=8), torch.nn.ReLU6(),
                            torch.nn.Conv2d(8, 16, 3, padding=1, groups=2)).eval()
fast = tensortune.compile(model, [torch.randn(2, 3, 8, 8)], target="cuda", budget=1, db=sys.argv[1], progress=False)
x = torch.randn(2, 3, 8, 8)
with torch.no_grad():
    got, want = fast(x), model(x)
from tensortune.db import Database
patterns = sorted(w.key.get("pattern", "") for w, _, _ in Database(sys.argv[1]).workloads())
print(json.dumps({"error": float((got - want).norm() / want.norm()), "patterns": patterns,
                  "fallbacks": len(fast.report.fallbacks)}))
"""


@pytest.mark.slow
def test_depthwise_and_grouped_convolutions_compile_to_their_own_kernels(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.path.join(ROOT, "src"), "TENSORTUNE_PROGRESS": "0"}
    done = subprocess.run([sys.executable, "-c", CNN_SCRIPT, str(tmp_path / "r.db")], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["fallbacks"] == 0 and result["error"] < 1e-4, result
    # the dense convolution is a contraction; the depthwise one and the grouped one (4 channels
    # per group) each their own grouped_conv kernel, with the activation fused
    assert result["patterns"] == ["contraction", "grouped_conv", "grouped_conv"], result
