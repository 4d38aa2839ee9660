"""The notebooks' learner-task check: unanswered shows the value, right passes, wrong raises."""

from __future__ import annotations

import pytest

from refimpl.errors import ConfigError
from refimpl.grading import WrongAnswer, check_answer


def test_an_unanswered_task_shows_the_value_and_does_not_fail(capsys):
    assert check_answer("pages", None, 94, exercise="kv_cache_sizing") is False
    out = capsys.readouterr().out
    assert "94" in out and "exercises/kv_cache_sizing" in out


def test_a_right_answer_passes_within_the_tolerance():
    assert check_answer("pages", 94, 94)
    assert check_answer("step_ms", 10.4, 10.0, rel_tol=0.05)
    assert check_answer("policy", " SLO ", "slo")  # strings: case and spaces do not matter


@pytest.mark.parametrize(("answer", "truth", "rel_tol"), [
    (93, 94, 0.0), (10.6, 10.0, 0.05), ("vllm", "slo", 0.0), (True, 1, 0.0), ("94", 94, 0.0),
])
def test_a_wrong_answer_raises_and_keeps_the_truth_out_of_the_message(answer, truth, rel_tol):
    with pytest.raises(WrongAnswer) as caught:
        check_answer("task", answer, truth, rel_tol=rel_tol, hint="count the last page")
    assert caught.value.truth == truth and caught.value.answer == answer
    message = str(caught.value)
    assert "Hint: count the last page." in message and "answer_task = None" in message
    assert repr(truth) not in message.replace(repr(answer), "")
    assert isinstance(caught.value, AssertionError)


@pytest.mark.parametrize(("field", "kwargs"), [
    ("task", {"task": "two words"}), ("rel_tol", {"rel_tol": 1.5}), ("rel_tol", {"rel_tol": -0.1}),
])
def test_a_bad_task_definition_names_the_field(field, kwargs):
    arguments = {"task": "pages", "rel_tol": 0.0, **kwargs}
    with pytest.raises(ConfigError, match=f"^{field}="):
        check_answer(arguments.pop("task"), 3, 3, **arguments)
