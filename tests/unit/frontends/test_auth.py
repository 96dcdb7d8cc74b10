"""Token authorization: the key file, Bearer checks per API, open probe paths, expiry and rotation."""

from __future__ import annotations

import json
import re
import stat

import pytest

from serve.errors import Unauthorized
from serve.frontends.http.auth import API, INFERENCE, MANAGEMENT, TokenAuth
from tests.unit.frontends.fakes import Server, run

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_key_file_layout_and_mode(tmp_path):
    auth = TokenAuth(tmp_path / "key_file.json", expiration_min=60)
    path = tmp_path / "key_file.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    keys = json.loads(path.read_text())
    assert set(keys) == {"management", "inference", "API"}
    assert set(keys["API"]) == {"key"}  # the API key never expires
    for kind in (MANAGEMENT, INFERENCE):
        assert keys[kind]["key"] == auth.key(kind) and STAMP.match(keys[kind]["expiration time"])
    assert len({auth.key(MANAGEMENT), auth.key(INFERENCE), auth.key(API)}) == 3
    auth.remove_key_file()
    assert not path.exists()


def test_an_existing_world_readable_key_file_becomes_0600(tmp_path):
    path = tmp_path / "key_file.json"
    path.write_text("{}")
    path.chmod(0o644)
    TokenAuth(path, expiration_min=60)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_check_messages_say_what_was_wrong(tmp_path):
    now = [1000.0]
    auth = TokenAuth(tmp_path / "k.json", expiration_min=1, clock=lambda: now[0])
    key = auth.key(INFERENCE)
    cases = [
        (None, "no Authorization header"),
        ("Basic abc", "not 'Bearer <key>'"),
        ("Bearer wrong", "not the current inference key"),
        (f"Bearer {auth.key(MANAGEMENT)}", "inference key"),
    ]
    torchserve = "Token Authorization failed. Token either incorrect, expired, or not provided correctly: "
    for header, needle in cases:
        with pytest.raises(Unauthorized, match=re.escape(needle)) as info:
            auth.check(INFERENCE, header)
        assert str(info.value).startswith(torchserve)  # TorchServe's words first: clients match on them
    auth.check(INFERENCE, f"Bearer  {key} ")
    auth.check(INFERENCE, f"bearer {key}")  # the scheme is case-insensitive (RFC 7235); the key is not
    with pytest.raises(Unauthorized, match="not the current inference key"):
        auth.check(INFERENCE, f"Bearer {key.swapcase()}")
    now[0] += 61
    with pytest.raises(Unauthorized, match=r"has expired.*GET /token\?type=inference"):
        auth.check(INFERENCE, f"Bearer {key}")


def test_disabled_auth_writes_no_file_and_lets_everything_through(tmp_path):
    auth = TokenAuth(tmp_path / "k.json", expiration_min=60, enabled=False)
    auth.check(INFERENCE, None)
    assert not (tmp_path / "k.json").exists()

    async def check(server: Server) -> None:
        assert (await server.inference.post("/predictions/mnist", content=b"x")).status_code == 200
        assert (await server.management.get("/models")).status_code == 200
        assert (await server.management.get("/token?type=inference")).status_code == 400

    run(check, tmp_path)


def test_inference_port_needs_the_inference_key_except_probes(tmp_path):
    async def check(server: Server) -> None:
        r = await server.inference.post("/predictions/mnist", content=b"x")
        body = r.json()
        assert (r.status_code, body["code"], body["type"]) == (401, 401, "InvalidKeyException")
        assert "Authorization: Bearer" in body["message"] and r.headers["www-authenticate"] == "Bearer"
        r = await server.inference.post(
            "/predictions/mnist", content=b"x", headers=_bearer(server.auth.key(MANAGEMENT))
        )
        assert r.status_code == 401
        r = await server.inference.post("/predictions/mnist", content=b"x", headers=_bearer(server.auth.key(INFERENCE)))
        assert r.status_code == 200
        assert not [c for c in server.registry.calls if c[0] == "submit"][1:]  # only the authorized one ran
        for path in ("/ping", "/api-description", "/openapi.json"):
            assert (await server.inference.get(path)).status_code == 200, path
        assert (await server.inference.options("/")).status_code == 200
        assert (await server.metrics_api.get("/metrics")).status_code == 200

    run(check, tmp_path, disable_token_authorization=False)


def test_management_port_needs_the_management_key(tmp_path):
    async def check(server: Server) -> None:
        assert (await server.management.get("/models")).status_code == 401
        r = await server.management.get("/models", headers=_bearer(server.auth.key(INFERENCE)))
        assert r.status_code == 401
        r = await server.management.get("/models", headers=_bearer(server.auth.key(MANAGEMENT)))
        assert r.status_code == 200
        assert (await server.management.put("/models/mnist?min_worker=1")).status_code == 401

    run(check, tmp_path, disable_token_authorization=False)


def test_token_rotation_with_the_api_key(tmp_path):
    async def check(server: Server) -> None:
        old = server.auth.key(INFERENCE)
        r = await server.management.get("/token?type=inference", headers=_bearer(server.auth.key(MANAGEMENT)))
        assert r.status_code == 401  # only the API key rotates
        r = await server.management.get("/token?type=inference", headers=_bearer(server.auth.key(API)))
        assert r.status_code == 200
        new = r.json()["inference"]["key"]
        assert new != old and new == server.auth.key(INFERENCE)
        assert json.loads((tmp_path / "key_file.json").read_text())["inference"]["key"] == new
        r = await server.inference.post("/predictions/mnist", content=b"x", headers=_bearer(old))
        assert r.status_code == 401
        r = await server.inference.post("/predictions/mnist", content=b"x", headers=_bearer(new))
        assert r.status_code == 200
        r = await server.management.get("/token?type=everything", headers=_bearer(server.auth.key(API)))
        assert r.status_code == 400 and "type=management" in r.json()["message"]

    run(check, tmp_path, disable_token_authorization=False)
