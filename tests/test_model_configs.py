"""One config dataclass per model family (GPTConfig, EncoderConfig, BertConfig, Seq2SeqConfig).

Each lists exactly the constructor's options with the same defaults (so the two cannot drift apart),
comments every field, and builds the same model as the keyword call.
"""

import inspect
import re
from dataclasses import MISSING, fields

import numpy as np
import pytest

from minitransformer import (
    GPT,
    BertConfig,
    BertMLM,
    EncoderConfig,
    GPTConfig,
    Seq2SeqConfig,
    Seq2SeqTransformer,
    TransformerEncoder,
)

NOT_CONFIG = {"self", "rng", "kernels"}       # where the numbers come from and which tier computes them
FAMILIES = [
    (GPT, GPTConfig, dict(vocab_size=11, d_model=8, n_heads=2, n_layers=2, d_ff=16, max_len=6)),
    (TransformerEncoder, EncoderConfig, dict(vocab_size=11, d_model=8, n_heads=2, n_layers=2, d_ff=16, max_len=6)),
    (BertMLM, BertConfig, dict(vocab_size=11, d_model=8, n_heads=2, n_layers=2, d_ff=16, max_len=6)),
    (Seq2SeqTransformer, Seq2SeqConfig, dict(src_vocab_size=11, tgt_vocab_size=9, d_model=8, n_heads=2,
                                             n_layers=1, d_ff=16, max_len=6)),
]
IDS = [model.__name__ for model, _, _ in FAMILIES]


@pytest.mark.parametrize("model, config, _", FAMILIES, ids=IDS)
def test_config_lists_the_constructors_options_with_its_defaults(model, config, _):
    parameters = {name: p for name, p in inspect.signature(model.__init__).parameters.items() if name not in NOT_CONFIG}
    assert [f.name for f in fields(config)] == list(parameters), f"{config.__name__} and {model.__name__}() differ"
    for field in fields(config):
        default = parameters[field.name].default
        if field.default is MISSING:
            assert default is inspect.Parameter.empty, f"{config.__name__}.{field.name} needs a default {default!r}"
        elif field.name == "dtype":
            assert np.dtype(field.default) == np.dtype(default), f"{config.__name__}.dtype"
        else:
            assert field.default == default, f"{config.__name__}.{field.name}: {field.default!r} != {default!r}"


@pytest.mark.parametrize("model, config, _", FAMILIES, ids=IDS)
def test_every_field_is_commented(model, config, _):
    source = inspect.getsource(config)
    for field in fields(config):
        line = re.search(rf"^\s+{field.name}:.*$", source, re.MULTILINE).group(0)
        assert re.search(r"#\s*\S", line), f"{config.__name__}.{field.name} has no comment"


@pytest.mark.parametrize("model, config, sizes", FAMILIES, ids=IDS)
def test_from_config_builds_the_keyword_model(model, config, sizes):
    built = model.from_config(config(**sizes, dropout=0.1), rng=4)
    direct = model(**sizes, dropout=0.1, rng=4)
    assert list(built.state_dict()) == list(direct.state_dict())
    for name, value in direct.state_dict().items():
        np.testing.assert_array_equal(built.state_dict()[name], value, err_msg=name)
    with pytest.raises(TypeError, match=f"{model.__name__}.from_config expected"):
        model.from_config(dict(sizes))


def test_gpt_from_config_passes_the_tier():
    from minitransformer.fast import kernels_of

    model = GPT.from_config(GPTConfig(11, 8, 2, 1, 16, 6), rng=0, kernels="fast")
    assert kernels_of(model) == "fast"
