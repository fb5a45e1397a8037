"""Whole models, each assembled from the layers in `minitransformer.layers`."""

from dataclasses import fields

import numpy as np


def config_dict(config_class, arguments):
    """A model's `config` (what a checkpoint needs to rebuild it): the constructor's `arguments` (its locals())
    named by the fields of its config dataclass, the one place a family's settings are listed; dtype by name."""
    values = {field.name: arguments[field.name] for field in fields(config_class)}
    if "dtype" in values:
        values["dtype"] = np.dtype(values["dtype"]).name
    return values



class FromConfig:
    """`Model.from_config(config, rng=..., **options)`: the model a config dataclass describes (nanoGPT style).

    A model family names its dataclass as `CONFIG`; the dataclass's fields are the constructor's options.
    """

    CONFIG = None

    @classmethod
    def from_config(cls, config, rng=None, **options):
        if not isinstance(config, cls.CONFIG):
            raise TypeError(f"{cls.__name__}.from_config expected a {cls.CONFIG.__name__}, got {type(config).__name__}")
        return cls(**vars(config), rng=rng, **options)
