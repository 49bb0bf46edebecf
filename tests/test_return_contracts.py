"""Return contracts (issue 22: 10.2 returning ``(logits, None)`` passed and broke the notebook;
10.3's check model returned a tuple where 10.2's prompt says logits): ``check_return`` holds a
candidate's return value to what the prompt states, with a message that says both."""

from __future__ import annotations

import pytest
import torch

from course_utils.checks._common import Out, check_return

LOGITS = Out("the logits", ("B", "T", "V"))  # named as the prompt says it
SIZES = {"B": 2, "T": 5, "V": 11}


def test_a_value_that_holds_the_contract_is_returned_as_is():
    x = torch.zeros(2, 5, 11)
    assert check_return(x, LOGITS, "Transformer.forward", SIZES) is x
    pair = (torch.zeros(2, 3), torch.zeros(2, 3, 4))
    assert check_return(pair, (Out("out"), Out("weights")), "f") is pair


def test_a_tuple_where_one_tensor_is_promised_says_return_only_it():
    with pytest.raises(TypeError) as err:
        check_return((torch.zeros(2, 5, 11), None), LOGITS, "Transformer.forward", SIZES)
    msg = str(err.value)
    assert "should return the logits (B, T, V), one tensor" in msg
    assert "a tuple of 2 (Tensor, None)" in msg and "return only the logits" in msg


def test_a_wrong_shape_names_the_sizes():
    with pytest.raises(ValueError) as err:
        check_return(torch.zeros(2, 11, 5), LOGITS, "Transformer.forward", SIZES)
    assert "shape (2, 11, 5), expected (2, 5, 11) = (B, T, V)" in str(err.value)


@pytest.mark.parametrize(
    "value,fragment",
    [
        (torch.zeros(2, 3), "should return a tuple (out, weights), got a Tensor"),
        ((torch.zeros(2),), "got a tuple of 1 (Tensor)"),
        ((torch.zeros(2), [1.0]), "weights as a torch.Tensor, got a list"),
        ((torch.zeros(2), torch.zeros(2, dtype=torch.long)), "dtype torch.int64"),
    ],
)
def test_pairs_are_checked_element_by_element(value, fragment):
    with pytest.raises((TypeError, ValueError)) as err:
        check_return(value, (Out("out"), Out("weights")), "f")
    assert fragment in str(err.value)
