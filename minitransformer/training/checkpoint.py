"""Checkpoints: everything a training run needs to continue exactly where it stopped.

A checkpoint is a directory with two files:

    checkpoint.json           model config, training config, tokenizer, step, loss history,
                              the state of every random generator, and the name and SHA-256 of:
    checkpoint-<sha>.npz      the parameters ("param.<name>") and optimizer state ("optim.<key>"),
                              named after the first 16 hex digits of its SHA-256

Arrays are stored as they are, so a save and a load round-trip bit for bit,
and a resumed run produces the same losses as one that never stopped
(tests/test_checkpoint.py). A save has one commit point: the arrays go to a
new, content-named file, the JSON is written to a temporary name, and only the
rename of the JSON makes the new checkpoint current; the previous arrays file
is deleted after that. An interrupted save therefore leaves the previous
checkpoint intact (at worst an unreferenced arrays file stays behind).

Loading checks before it writes: a missing file, a truncated or altered array
file (the checksum), or a model or optimizer whose configuration differs from
the saved one raises `CheckpointError` with the reason, and nothing is loaded.

Left out: keeping several checkpoints, sharding, compression.
"""

import hashlib
import json
import os
import zipfile

import numpy as np

JSON_NAME = "checkpoint.json"
ARRAYS_PATTERN = "checkpoint-{}.npz"           # filled with the first 16 hex digits of the SHA-256
LEGACY_ARRAYS_NAME = "checkpoint.npz"           # checkpoints written before content-named arrays files
FORMAT_VERSION = 1


class CheckpointError(Exception):
    """A checkpoint could not be read or does not fit the model it is loaded into."""


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def save_checkpoint(directory, model, optimizer, meta):
    """Write model parameters, optimizer state and `meta` (JSON-serialisable) to `directory`.

    Args:
        directory: created if missing.
        model: a Module with `config` and `state_dict()`.
        optimizer: an Optimizer (or None).
        meta: dict, e.g. {"step": ..., "train_config": ..., "tokenizer": ..., "rng": ...}.
    """
    os.makedirs(directory, exist_ok=True)
    arrays = {f"param.{name}": value for name, value in model.state_dict().items()}
    optimizer_scalars = {}
    if optimizer is not None:
        for key, value in optimizer.state_dict().items():
            if isinstance(value, np.ndarray):
                arrays[f"optim.{key}"] = value
            else:
                optimizer_scalars[key] = value
    temporary_arrays = os.path.join(directory, "checkpoint-arrays.tmp")
    with open(temporary_arrays, "wb") as file:
        np.savez(file, **arrays)
    checksum = _sha256(temporary_arrays)
    arrays_name = ARRAYS_PATTERN.format(checksum[:16])
    os.replace(temporary_arrays, os.path.join(directory, arrays_name))   # a new name: nothing current changes
    document = dict(meta, format_version=FORMAT_VERSION, model_config=model.config,
                    optimizer=None if optimizer is None else {"type": type(optimizer).__name__, **optimizer_scalars},
                    arrays_file=arrays_name, arrays_sha256=checksum)
    json_path = os.path.join(directory, JSON_NAME)
    with open(json_path + ".tmp", "w") as file:
        json.dump(document, file, indent=1)
    os.replace(json_path + ".tmp", json_path)                             # the one commit point
    for name in os.listdir(directory):                                    # arrays of earlier checkpoints
        if name != arrays_name and (name == LEGACY_ARRAYS_NAME or
                                    (name.startswith("checkpoint-") and name.endswith(".npz"))):
            os.remove(os.path.join(directory, name))


def read_checkpoint(directory):
    """Read and verify a checkpoint without loading it into anything.

    Returns:
        (meta dict, arrays dict name -> ndarray).
    Raises:
        CheckpointError naming the problem (missing, truncated, altered, unreadable).
    """
    json_path = os.path.join(directory, JSON_NAME)
    if not os.path.isfile(json_path):
        raise CheckpointError(f"no checkpoint at {directory}: {JSON_NAME} is missing")
    try:
        with open(json_path) as file:
            meta = json.load(file)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"checkpoint {json_path} is not valid JSON (truncated?): {error}") from None
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {directory} has format {meta.get('format_version')}, "
                              f"this version reads format {FORMAT_VERSION}")
    arrays_path = os.path.join(directory, os.path.basename(meta.get("arrays_file", LEGACY_ARRAYS_NAME)))
    if not os.path.isfile(arrays_path):
        raise CheckpointError(f"no checkpoint at {directory}: {os.path.basename(arrays_path)} is missing")
    if _sha256(arrays_path) != meta.get("arrays_sha256"):
        raise CheckpointError(f"checkpoint {arrays_path} is truncated or altered (checksum mismatch)")
    try:
        with np.load(arrays_path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (zipfile.BadZipFile, EOFError, ValueError, OSError) as error:
        raise CheckpointError(f"checkpoint {arrays_path} cannot be read: {error}") from None
    return meta, arrays


def _config_differences(saved, current):
    keys = sorted(set(saved) | set(current))
    return [f"{key}: checkpoint {saved.get(key)!r}, now {current.get(key)!r}"
            for key in keys if saved.get(key) != current.get(key)]


def load_checkpoint(directory, model, optimizer=None, contents=None):
    """Load parameters (and optimizer state) saved by `save_checkpoint` into existing objects.

    Everything is checked first; on any error nothing has been changed.

    Args:
        contents: what `read_checkpoint(directory)` returned, if the caller has already read it
            (the file is then not read and hashed again).
    Returns:
        the meta dictionary (step, rng states, history, ...).
    """
    meta, arrays = read_checkpoint(directory) if contents is None else contents
    differences = _config_differences(meta["model_config"], model.config)
    if differences:
        raise CheckpointError(f"checkpoint {directory} is for a different model: " + "; ".join(differences))
    params = {name[len("param."):]: value for name, value in arrays.items() if name.startswith("param.")}
    current = dict(model.named_parameters())
    if set(params) != set(current) or any(params[n].shape != p.shape or params[n].dtype != p.dtype
                                          for n, p in current.items()):
        raise CheckpointError(f"checkpoint {directory}: parameter names, shapes or dtypes differ from {model!r}")
    optimizer_state = None
    if optimizer is not None:
        saved = meta.get("optimizer")
        if saved is None or saved.get("type") != type(optimizer).__name__:
            raise CheckpointError(f"checkpoint {directory} holds optimizer {saved and saved.get('type')}, "
                                  f"not {type(optimizer).__name__}")
        optimizer_state = {key: value for key, value in saved.items() if key != "type"}
        optimizer_state.update({name[len("optim."):]: value for name, value in arrays.items()
                                if name.startswith("optim.")})
        try:                                                # validates every buffer before writing any
            optimizer.load_state_dict(optimizer_state)
        except (KeyError, ValueError) as error:
            raise CheckpointError(f"checkpoint {directory}: optimizer state does not fit: {error}") from None
    model.load_state_dict(params)                           # names, shapes, dtypes checked above
    return meta
