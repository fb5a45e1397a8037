"""0.3's module paths that 0.4 moved keep working for one version, with a DeprecationWarning naming the new ones."""

import importlib
import importlib.util
import sys

import pytest

from minitransformer import _compat
from minitransformer.objectives.language_model import LanguageModelObjective, Trainer
from minitransformer.objectives.masked_lm import MaskedLMObjective
from minitransformer.objectives.seq2seq import Seq2SeqObjective, train_seq2seq
from minitransformer.tasks.majority import majority_task
from minitransformer.tasks.reverse import ReverseTask
from minitransformer.training.config import TrainConfig
from minitransformer.training.loop import TrainingDiverged

OLD = {"training.trainer": {"Trainer": Trainer, "TrainingDiverged": TrainingDiverged, "TrainConfig": TrainConfig},
       "training.objectives": {"LanguageModelObjective": LanguageModelObjective,
                               "Seq2SeqObjective": Seq2SeqObjective, "MaskedLMObjective": MaskedLMObjective},
       "training.encdec": {"train_seq2seq": train_seq2seq},
       "training.tasks": {"ReverseTask": ReverseTask, "majority_task": majority_task}}


@pytest.mark.parametrize("old", sorted(OLD))
def test_an_old_path_gives_the_same_objects_and_warns(old, monkeypatch):
    monkeypatch.delitem(sys.modules, f"minitransformer.{old}", raising=False)
    with pytest.warns(DeprecationWarning, match=rf"minitransformer\.{old} moved to .* in 0.4; the old path goes in 0.5"):
        module = importlib.import_module(f"minitransformer.{old}")
    for name, value in OLD[old].items():
        assert getattr(module, name) is value, f"minitransformer.{old}.{name}"


def test_every_old_path_is_tested_and_gone_from_disk():
    assert set(OLD) == set(_compat.OLD_PATHS)
    for old in OLD:
        assert importlib.util.find_spec(f"minitransformer.{old}").loader.__class__.__name__ == "_AliasLoader"
