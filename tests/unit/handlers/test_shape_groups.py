"""handlers/shape_groups.py: which group of a batch a model's failure answers, and with which status."""

from __future__ import annotations

import pytest

from handlers.shape_groups import MAX_ANSWERED, AnsweredShapes, Group, run_groups
from serve.errors import InvalidInput, PredictionException

A, B, C = ((3,), "float32"), ((2, 2), "float32"), ((3,), "int64")


def groups() -> list[Group]:
    return [Group(A, [0, 2], "a"), Group(B, [1], "b"), Group(C, [3], "c")]


def run_failing(failures: dict[str, Exception]):
    def run(group: Group) -> list:
        if group.batch in failures:
            raise failures[group.batch]
        return [f"{group.batch}{i}" for i in group.indices]

    return run


def answers(failures: dict[str, Exception], answered: AnsweredShapes) -> tuple[list, dict]:
    failed: dict = {}
    out = run_groups(groups(), run_failing(failures), answered, lambda i, code, msg, kind: failed.update({i: code}))
    return out, failed


def test_every_group_answered_in_batch_order():
    answered = AnsweredShapes()
    assert answers({}, answered) == (["a0", "b1", "a2", "c3"], {})
    assert all(key in answered for key in (A, B, C))


def test_a_group_of_a_shape_never_answered_is_400_when_another_shape_is():
    out, failed = answers({"b": RuntimeError("conv2d: wrong channels")}, AnsweredShapes())
    assert out == ["a0", "a2", "c3"] and failed == {1: 400}


def test_a_shape_answered_before_that_fails_now_is_the_models_fault():
    out, failed = answers({"b": RuntimeError("flaky")}, AnsweredShapes([B]))
    assert out == ["a0", "a2", "c3"] and failed == {1: 503}


def test_nothing_answered_ever_fails_the_batch_as_before():
    everything = {"a": RuntimeError("broken"), "b": RuntimeError("broken"), "c": RuntimeError("broken")}
    with pytest.raises(RuntimeError, match="broken"):
        answers(everything, AnsweredShapes())
    _, failed = answers(everything, AnsweredShapes([A]))  # A failing now is the model's; B and C are never-seen
    assert failed == {0: 503, 2: 503, 1: 400, 3: 400}


def test_a_groups_own_status_is_kept():
    _, failed = answers({"b": PredictionException("too large", 413), "c": InvalidInput("bad")}, AnsweredShapes())
    assert failed == {1: 413, 3: 400}


@pytest.mark.parametrize("error", [MemoryError("host"), RuntimeError("cudaErrorIllegalAddress: an illegal access")])
def test_out_of_memory_and_a_lost_device_fail_the_batch(error):
    with pytest.raises(type(error)):
        answers({"b": error}, AnsweredShapes([A, B, C]))


def test_answered_shapes_are_bounded_and_name_the_newest():
    answered = AnsweredShapes([((n,), "float32") for n in range(MAX_ANSWERED + 5)])
    assert ((0,), "float32") not in answered and ((MAX_ANSWERED + 4,), "float32") in answered
    assert answered.shown().startswith(f"({MAX_ANSWERED + 4},) float32 or ")
