"""Java .properties parsing (comments, separators, continuations, escapes), writing, and $$NAME$$ substitution."""

from __future__ import annotations

import pytest

from serve.config.properties import format_property, parse_properties, read_properties, substitute
from serve.errors import ConfigError


def test_separators_comments_and_blanks() -> None:
    text = "# a comment\n! also a comment\n\n  a=1\nb : 2\nc 3\nd\t=\t4\ne=\nf\n  g = x = y\n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "4", "e": "", "f": "", "g": "x = y"}


def test_later_duplicate_wins_and_line_endings() -> None:
    assert parse_properties("a=1\r\nb=2\ra=3") == {"a": "3", "b": "2"}


def test_continuation_lines() -> None:
    text = "load_models=a.mar,\\\n    b.mar,\\\n    # not a comment\nnext=1\n"
    assert parse_properties(text) == {"load_models": "a.mar,b.mar,# not a comment", "next": "1"}


def test_even_backslashes_do_not_continue_and_comments_never_continue() -> None:
    text = "path=C:\\\\dir\\\\\nx=1\n# comment \\\ny=2\n"
    assert parse_properties(text) == {"path": "C:\\dir\\", "x": "1", "y": "2"}


def test_continuation_at_end_of_file() -> None:
    assert parse_properties("a=1\\") == {"a": "1"}


def test_escapes_in_keys_and_values() -> None:
    text = "my\\ key\\=x=v\\tw\\nz\\u00e9\\:\\q\n"
    assert parse_properties(text) == {"my key=x": "v\tw\nz\u00e9:q"}


def test_surrogate_pairs_join() -> None:
    assert parse_properties("a=\\ud83d\\ude00") == {"a": "\U0001f600"}


def test_trailing_blanks_dropped_unless_escaped() -> None:
    assert parse_properties("a=x  \t\nb=x\\ \nc=\\ \n") == {"a": "x", "b": "x ", "c": " "}


@pytest.mark.parametrize("bad", ["a=\\u12", "a=\\uZZZZ", "a=x\\u00g0"])
def test_malformed_unicode_escape_names_the_line(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"cfg:2: malformed \\uXXXX"):
        parse_properties("ok=1\n" + bad, "cfg")


@pytest.mark.parametrize(
    "key,value",
    [
        ("model_snapshot", '{"a": "b\\\\c", "d": [1, 2]}'),
        ("k", " lead"),
        ("a b=c:d", "#x\n\ty\u00e9\U0001f600"),
        ("k", ""),
    ],
)
def test_format_property_round_trips(key: str, value: str) -> None:
    line = format_property(key, value)
    assert "\n" not in line and line.isascii()
    assert parse_properties(line) == {key: value}


def test_substitution() -> None:
    env = {"HOME_DIR": "/srv", "PORT": "9090"}
    assert substitute("k", "$$HOME_DIR$$/models", env, "f") == "/srv/models"
    assert substitute("k", "http://h:$$PORT$$-$$PORT$$", env, "f") == "http://h:9090-9090"
    assert substitute("k", "no refs $ or $$", env, "f") == "no refs $ or $$"


def test_substitution_of_unset_variable_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"f: model_store = '\$\$NOPE\$\$/x' refers to .* NOPE, which is not set"):
        substitute("model_store", "$$NOPE$$/x", {}, "f")


def test_read_properties_substitutes_and_reports_missing_files(tmp_path) -> None:
    cfg = tmp_path / "config.properties"
    cfg.write_text("model_store=$$STORE$$\nplain=1\n")
    assert read_properties(cfg, {"STORE": "/m"}) == {"model_store": "/m", "plain": "1"}
    with pytest.raises(ConfigError, match="cannot read the config file"):
        read_properties(tmp_path / "missing.properties", {})


def test_read_properties_falls_back_to_latin1(tmp_path) -> None:
    cfg = tmp_path / "config.properties"
    cfg.write_bytes(b"name=caf\xe9\n")
    assert read_properties(cfg, {}) == {"name": "caf\u00e9"}
