"""TorchServe handler for bench/server_bf16.py's ResNet-50: the anchor's BenchHandler with ResNet-50 as its model.

Runs inside TorchServe's worker (its venv: torch, TorchServe), never in serve. The .mar ships this file, the
anchor's handlers/bench_handler.py and bench/ts_resnet50_model.py. Everything per request is the anchor's: `.npy`
float32 3x224x224 bodies decoded, stacked into a batch, the forward pass under inference_mode on 2 threads
(BENCH_TORCH_THREADS), top-5 `[index, logit]` answered. Only `initialize` differs, because the anchor's picks its
model from models.py by name and has no ResNet-50: here it builds ts_resnet50_model.resnet50() and loads the
archive's state_dict (the seeded weights serve loads too).
"""

import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the archive's folder: the two files beside this one

import bench_handler
import torch
from ts_resnet50_model import resnet50


class ResNet50Handler(bench_handler.BenchHandler):
    def initialize(self, context):
        model_dir = context.system_properties.get("model_dir")
        torch.set_num_threads(int(os.environ.get("BENCH_TORCH_THREADS", "2")))
        self.manifest = context.manifest
        self.kind = "resnet18"  # the anchor handler's image kind: (3, 224, 224) rows in, top-5 out
        self.model = resnet50()
        pt = os.path.join(model_dir, self.manifest["model"]["serializedFile"])
        self.model.load_state_dict(torch.load(pt, map_location="cpu", weights_only=True))
        self.model.eval()
        self.device = torch.device("cpu")
        self.hist = Counter()  # the anchor's batch-size histogram (its _record), kept working
        self.hist_dir = os.environ.get("BENCH_HIST_DIR", "/tmp/ts_bench_hist")
        os.makedirs(self.hist_dir, exist_ok=True)
        self.hist_path = os.path.join(self.hist_dir, self.manifest["model"]["modelName"] + ".json")
        self.hist_t = 0.0
        self.initialized = True
