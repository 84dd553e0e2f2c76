"""The one name rule (hookbus.sinks.mlflow_name), checked against MLflow's own validation.

MLflow's validators are the reference: every name the rule gives passes them as a metric, param
and tag name; every name they accept (within 250 characters) is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("mlflow")

from mlflow.exceptions import MlflowException  # noqa: E402 - after the importorskip
from mlflow.utils.validation import (  # noqa: E402
    _validate_metric_name,
    _validate_param_name,
    _validate_tag_name,
)

from hookbus.sinks import mlflow_name  # noqa: E402
from hookbus.sinks.mlflow._names import check_names, names_tags  # noqa: E402

# Keys as hookbus allows them (checked before step 1): any character but line breaks and control characters.
KEYS = st.text(st.characters(exclude_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=300)
# Names built from the characters MLflow accepts, to find the ones it refuses all the same.
NEAR_VALID = st.text(st.sampled_from(list("ab/._- :é1")), min_size=1, max_size=12)


VALIDATORS: list[Callable[[str], object]] = [_validate_metric_name, _validate_param_name, _validate_tag_name]


def accepted(name: str) -> bool:
    try:
        for validate in VALIDATORS:
            validate(name)
    except MlflowException:
        return False
    return len(name) <= 250


@given(st.one_of(KEYS, NEAR_VALID))
def test_every_mapped_name_passes_mlflows_validation(key: str) -> None:
    name = mlflow_name(key)
    assert accepted(name), (key, name)
    assert mlflow_name(name) == name  # the rule is idempotent


@given(st.one_of(KEYS, NEAR_VALID))
def test_names_mlflow_accepts_are_unchanged(key: str) -> None:
    if accepted(key):
        assert mlflow_name(key) == key


def test_the_rule_on_examples() -> None:
    assert mlflow_name("loss (smoothed)%") == "loss _smoothed__"
    assert mlflow_name("eval//acc") == "eval/acc"
    assert mlflow_name("/a/b/") == "a/b"
    assert mlflow_name("a/./b") == "a/_/b"
    assert mlflow_name("a/../b") == "a/__/b"
    assert mlflow_name("..x") == "_.x"
    assert mlflow_name("///") == "_"
    assert mlflow_name("naïve·λ") == "naïve_λ"  # \w is Unicode, as MLflow's check reads it
    long = mlflow_name("x" * 300)
    assert len(long) == 250
    assert long.startswith("x" * 241 + "_")
    assert long != mlflow_name("x" * 301)  # the digest of the whole key tells long keys apart


def test_collisions_name_both_keys_and_the_tag_records_changed_names() -> None:
    with pytest.raises(ValueError, match=r"keys 'a b%' and 'a b\?' both map to the MLflow name 'a b_'"):
        check_names(["a b%", "a b?", "c"])
    mapping = check_names(["loss", "acc%", "x" * 300])
    tags = names_tags(mapping)
    assert list(tags) == ["hookbus.names"]
    assert "loss" not in tags["hookbus.names"]
    many = check_names([f"{i:04d}" + "%" * 40 for i in range(400)])  # ~36 kB of JSON: several tags
    split = names_tags(many)
    assert len(split) > 1
    assert all(len(v) <= 8000 for v in split.values())
    assert list(split)[:2] == ["hookbus.names", "hookbus.names.2"]
