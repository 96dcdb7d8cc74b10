"""bench/generation_llamacpp.py kept from rotting without a llama.cpp build: a stand-in `llama-server` (a Python
script with its command line, its port-0 log line, a /health that answers 503 while "loading", and streamed
/v1/completions) is started, found ready, loaded in paired rounds beside a second one playing serve, and reported."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
pytest.importorskip("aiohttp")
import generation_llamacpp as gl  # noqa: E402

FAKE = """
import json, sys, time
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
args = sys.argv[1:]
if args == ["--version"]:
    print("version: 0.0.1-dev (build 1234, commit abcdef0)"); sys.exit(0)
assert args[args.index("--port") + 1] == "0" and args[args.index("-np") + 1] == "16", args
health = {"calls": 0}
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        health["calls"] += 1
        code = 200 if health["calls"] > 1 else 503
        self.send_response(code); self.send_header("Content-Length", "0"); self.end_headers()
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert body["ignore_eos"] and body["stream"] and isinstance(body["prompt"][0], int), body
        self.send_response(200); self.send_header("Content-Type", "text/event-stream"); self.end_headers()
        for i in range(body["max_tokens"]):
            self.wfile.write(b"data: " + json.dumps({"choices": [{"text": "x", "index": 0}]}).encode() + b"\\n\\n")
            self.wfile.flush(); time.sleep(0.001)
        usage = {"choices": [], "usage": {"completion_tokens": body["max_tokens"]}}
        self.wfile.write(b"data: " + json.dumps(usage).encode() + b"\\n\\ndata: [DONE]\\n\\n"); self.wfile.flush()
        self.close_connection = True
server = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(f"srv main: listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
"""


@pytest.fixture
def fake_build(tmp_path: Path) -> dict:
    binary = tmp_path / "llama-server"
    binary.write_text(f"#!{sys.executable}\n{FAKE}")
    binary.chmod(0o755)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"")
    models = tmp_path / "models"
    models.mkdir()
    (models / "tiny-q8_0.gguf").write_bytes(b"GGUF")  # newer than the folder: no conversion
    info = {"sdist": "llama_cpp_python-0.0.0", "server": str(binary), "convert": str(tmp_path / "c.py"),
            "gguf_py": ""}  # fmt: skip
    (tmp_path / "build.json").write_text(json.dumps(info))
    return {**info, "root": str(tmp_path), "folder": folder}


def test_find_build(tmp_path: Path, fake_build: dict) -> None:
    build = gl.find_build(tmp_path)
    assert build is not None and build["server"] == fake_build["server"]
    with pytest.raises(SystemExit, match=r"llamacpp_build\.sh"):
        gl.find_build(tmp_path / "missing")


def test_paired_rounds_against_stand_ins(tmp_path: Path, fake_build: dict) -> None:
    log = tmp_path / "as-serve.log"
    serve_side = gl.LlamaServer(fake_build["server"], tmp_path / "x.gguf", "tiny", 16, 2, 64, log, start_seconds=120)
    try:
        assert serve_side.version() == "0.0.1-dev (build 1234, commit abcdef0)"
        result = gl.paired_rounds(fake_build, fake_build["folder"], "tiny", serve_side.port, [("q8_0", 1)], [1, 4],
                                  2, 100, 8, 6, 2, tmp_path / "logs")  # fmt: skip
    finally:
        serve_side.stop()
    assert serve_side.proc.returncode is not None
    rows = result["runs"]["q8_0, 1 thread"]["rows"]
    assert [r["concurrency"] for r in rows] == [1, 4]
    for row in rows:
        for side in ("serve", "llamacpp"):
            assert row[side]["errors"] == 0 and row[side]["tokens_min_max"] == [6, 6], row[side]
            assert len(row[side]["tokens_per_s_all"]) == 2  # one per round
        assert row["ratio_tokens_per_s"] > 0
    text = gl.section({"model": "tiny", "dtype": "float32", "llamacpp": result})
    table = [line for line in text.splitlines() if line.startswith("| q8_0, 1 thread |")]
    assert len(table) == 2 and table[0].split("|")[3].strip() == "1", text
    assert "llama_cpp_python-0.0.0" in text and "paired rounds (2" in text and "build 1234" in text


def test_a_server_that_exits_is_reported(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\necho 'error: unknown argument' >&2\nexit 3\n")
    binary.chmod(0o755)
    with pytest.raises(RuntimeError, match="exited with 3"):
        gl.LlamaServer(str(binary), tmp_path / "x.gguf", "m", 16, 2, 64, tmp_path / "l.log", start_seconds=60)
    assert "unknown argument" in (tmp_path / "l.log").read_text()
