"""Checkpoints: everything a training run needs to continue exactly where it stopped.

A checkpoint is a directory with two files:

    checkpoint.json               format_version, model_config, the optimizer's scalars, and the name and
                                  SHA-256 of the arrays file; a training loop's run besides (below)
    checkpoint-<sha>-<rand>.npz   the parameters ("param.<name>") and optimizer state ("optim.<key>"),
                                  named after the first 16 hex digits of its SHA-256 and a random
                                  suffix, so that no two saves ever write the same name

One schema for every run (format 2), what `TrainingLoop.save` adds to checkpoint.json:

    step, history, rng            the steps done; every step's loss and rate and every evaluation (with
                                  perplexities); the state of every random generator of the run
    run                           null, or the command's record of its run (training/resuming.py):
                                  {"command", "options", "text" (train's), "phase" (finetune's)}
    train_config, tokenizer       the language model's (`Trainer`): what `sample` and `--resume` rebuild

Format 1 (0.2 to 0.4) is read as format 2 (`_from_format_1`): 0.4's loop checkpoints named their command
`objective` and their phase at the top level; `train`'s run was unnamed; 0.2 and 0.3 kept no perplexities.

Arrays are stored as they are, so a save and a load round-trip bit for bit,
and a resumed run produces the same losses as one that never stopped
(tests/test_checkpoint.py).

A save has one commit point. The arrays and the JSON are written under unique
temporary names (`.checkpoint-*.tmp`), the arrays renamed to their final name,
and only the rename of the JSON onto `checkpoint.json` makes the new checkpoint
current. After that the save removes one file: the arrays file that the
checkpoint it replaced named (read before the commit), and only if it has a
name that saves write, so a user's `checkpoint-best.npz` is never touched.
Hence an interrupted save leaves the previous checkpoint intact, and several
processes saving into one directory never fail because of each other: the last
rename wins, and `checkpoint.json` always names a complete arrays file (a file
a save deletes was named by a checkpoint that had already been replaced, and
names are never reused; tests/test_checkpoint_safety.py). `save_checkpoint`
replaces what is there; refusing to replace a run's checkpoint is the
trainer's and the command's job (`Trainer(overwrite=...)`, `train --force`).
Concurrent saves may leave an arrays file that no checkpoint names (two saves
that both replaced the same checkpoint); it is never one that is current.

Loading checks before it writes: a missing file, a truncated or altered array
file (the checksum), a `checkpoint.json` that is not what a save writes (a
missing key, a wrong type), or a model or optimizer whose configuration differs
from the saved one raises `CheckpointError` with the reason, and nothing is
loaded. `read_checkpoint` checks a run's fields once (`_check_run`), so what it
returns can be handed on (`contents=`) without being read or checked again.

Left out: keeping several checkpoints, sharding, compression, locking.
"""

import dataclasses
import hashlib
import json
import math
import os
import re
import secrets
import tempfile
import zipfile

import numpy as np

from .config import TrainConfig
from .metrics import perplexity

JSON_NAME = "checkpoint.json"
ARRAYS_PATTERN = "checkpoint-{}-{}.npz"         # the first 16 hex digits of the SHA-256, 8 random hex digits
LEGACY_ARRAYS_NAME = "checkpoint.npz"           # checkpoints written before content-named arrays files
FORMAT_VERSION = 2                              # what a save writes; format 1 (0.2 to 0.4) is read too
# The arrays files a save may delete: names saves write (0.2's content-named ones and the legacy name included).
SAVED_ARRAYS_NAME = re.compile(r"checkpoint(-[0-9a-f]{16}(-[0-9a-f]{8})?)?\.npz")
# TrainConfig fields every checkpoint holds (0.2 wrote these); fields added since may be missing and take
# their defaults (e.g. `kernels`, `worker_timeout`).
TRAIN_CONFIG_FIELDS_0_2 = ("block_size", "batch_size", "n_layers", "n_heads", "d_model", "d_ff", "dropout", "dtype",
                           "max_steps", "lr", "min_lr", "warmup_steps", "lr_decay_steps", "schedule", "weight_decay",
                           "decay_embeddings", "beta1", "beta2", "grad_clip", "eval_interval", "eval_batches",
                           "seed", "workers")

# Model options added after a checkpoint format was fixed: a checkpoint written before lacks them, and they
# then take the value every model had before (0.3's GPTs all used LayerNorm and biases; 0.4's modern decoder added the options).
MODEL_CONFIG_ADDED = {"norm_layer": "layernorm", "bias": True}

# Format 1's marks of a training run's checkpoint (whose run's fields are then checked): 0.4's loops wrote
# `objective`, the GPT trainer (since 0.2) these others
TRAINER_KEYS_1 = ("objective", "train_config", "tokenizer", "history", "rng")


class CheckpointError(Exception):
    """A checkpoint could not be read or does not fit the model it is loaded into."""


class CheckpointExistsError(CheckpointError):
    """A fresh run was about to replace a checkpoint it did not write (see `Trainer(overwrite=...)`)."""


def has_checkpoint(directory):
    """True if `directory` holds a checkpoint (its `checkpoint.json`)."""
    return os.path.isfile(os.path.join(directory, JSON_NAME))


def refuse_to_replace(directory, overwrite, who, how_to_continue):
    """CheckpointExistsError if a fresh run `who` would replace the checkpoint in `directory` (unless `overwrite`)."""
    if directory is not None and not overwrite and has_checkpoint(directory):
        raise CheckpointExistsError(
            f"{who}: out_dir {os.fspath(directory)} already holds a checkpoint, which a fresh run would replace; "
            f"continue it with {how_to_continue}, pass overwrite=True to replace it, or choose another out_dir")


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
    json_path = os.path.join(directory, JSON_NAME)
    replaced = _arrays_name_of(json_path)               # read before the commit: see the module docstring
    temporary = _temporary_file(directory)
    try:
        with open(temporary, "wb") as file:
            np.savez(file, **arrays)
        checksum = _sha256(temporary)
        arrays_name = ARRAYS_PATTERN.format(checksum[:16], secrets.token_hex(4))     # unique, not a model's randomness
        arrays_path = os.path.join(directory, arrays_name)
        os.replace(temporary, arrays_path)                                # a new name: nothing current changes
    except BaseException:
        _remove_if_there(temporary)
        raise
    document = dict(meta, format_version=FORMAT_VERSION, model_config=getattr(model, "config", {}),
                    optimizer=None if optimizer is None else {"type": optimizer.rule, **optimizer_scalars},
                    arrays_file=arrays_name, arrays_sha256=checksum)
    temporary = _temporary_file(directory)
    try:
        with open(temporary, "w", encoding="utf-8") as file:
            json.dump(document, file, indent=1)
        os.replace(temporary, json_path)                                  # the one commit point
    except BaseException:
        _remove_if_there(temporary)
        _remove_if_there(arrays_path)                                     # named by no checkpoint
        raise
    if replaced is not None and replaced != arrays_name and SAVED_ARRAYS_NAME.fullmatch(replaced):
        try:
            _remove_if_there(os.path.join(directory, replaced))           # the replaced checkpoint's arrays
        except PermissionError:                 # Windows: another process (a `sample`) still reads it; it stays,
            pass                                # named by no checkpoint, and the save stands


def _temporary_file(directory):
    """A new, empty file with a unique name in `directory` (so concurrent saves never share one)."""
    descriptor, path = tempfile.mkstemp(prefix=".checkpoint-", suffix=".tmp", dir=directory)
    os.close(descriptor)
    return path


def _remove_if_there(path):
    try:
        os.remove(path)
    except FileNotFoundError:                   # another save into the same directory removed it first
        pass


def _arrays_name_of(json_path):
    """The arrays file that the checkpoint.json at `json_path` names, or None (no file, or not a save's JSON)."""
    try:
        with open(json_path, encoding="utf-8") as file:
            document = json.load(file)
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict):
        return None
    name = document.get("arrays_file", LEGACY_ARRAYS_NAME)
    return name if isinstance(name, str) and name == os.path.basename(name) else None


def read_checkpoint(directory):
    """Read and verify a checkpoint without loading it into anything.

    Returns:
        (meta dict, arrays dict name -> ndarray).
    Raises:
        CheckpointError naming the problem (missing, truncated, altered, unreadable, not a save's JSON).
    """
    json_path = os.path.join(directory, JSON_NAME)
    for attempt in range(3):
        text = _read_json_text(directory, json_path)
        meta = _parse_meta(text, json_path)
        arrays_path = os.path.join(directory, os.path.basename(meta.get("arrays_file", LEGACY_ARRAYS_NAME)))
        try:
            return meta, _read_arrays(arrays_path, meta["arrays_sha256"])
        except FileNotFoundError:
            # A concurrent save may have replaced the checkpoint (and removed these arrays) since the JSON
            # was read: then read the new one. If the JSON is unchanged, its arrays file is really missing.
            if attempt == 2 or _read_json_text(directory, json_path) == text:
                raise CheckpointError(f"no checkpoint at {directory}: "
                                      f"{os.path.basename(arrays_path)} is missing") from None


def _read_arrays(arrays_path, checksum):
    """The arrays of the file at `arrays_path`, after checking its SHA-256 (FileNotFoundError if missing)."""
    if _sha256(arrays_path) != checksum:
        raise CheckpointError(f"checkpoint {arrays_path} is truncated or altered (checksum mismatch)")
    try:
        with np.load(arrays_path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, EOFError, ValueError, OSError) as error:
        raise CheckpointError(f"checkpoint {arrays_path} cannot be read: {error}") from None


def _read_json_text(directory, json_path):
    if not os.path.isfile(json_path):
        raise CheckpointError(f"no checkpoint at {directory}: {JSON_NAME} is missing")
    try:
        with open(json_path, "rb") as file:
            return file.read()
    except OSError as error:
        raise CheckpointError(f"checkpoint {json_path} cannot be read: {error.strerror or error}") from None


def _parse_meta(text, json_path):
    """checkpoint.json's bytes -> its dictionary, with the fields every checkpoint has checked."""
    try:
        meta = json.loads(text.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"checkpoint {json_path} is not valid JSON (truncated?): {error}") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"checkpoint {json_path} must hold a JSON object, got {_json_type(meta)}")
    version = meta.get("format_version")
    if type(version) is not int or version not in (1, FORMAT_VERSION):
        raise CheckpointError(f"checkpoint {json_path} has format {version!r}, "
                              f"this version reads formats 1 and {FORMAT_VERSION}")
    if version == 1:
        meta = _from_format_1(meta)
    arrays_file = meta.get("arrays_file", LEGACY_ARRAYS_NAME)
    if not isinstance(arrays_file, str) or os.path.basename(arrays_file) in ("", ".", ".."):
        raise CheckpointError(f"checkpoint {json_path}: 'arrays_file' must be a file name, got {arrays_file!r}")
    checksum = meta.get("arrays_sha256")
    if not isinstance(checksum, str) or not re.fullmatch(r"[0-9a-f]{64}", checksum):
        raise CheckpointError(f"checkpoint {json_path}: 'arrays_sha256' must be 64 hex digits, got {checksum!r}")
    if not isinstance(meta.get("model_config"), dict):
        raise CheckpointError(f"checkpoint {json_path}: 'model_config' must be an object, "
                              f"got {_json_type(meta.get('model_config'))}")
    optimizer = meta.get("optimizer")
    if optimizer is not None and not (isinstance(optimizer, dict) and isinstance(optimizer.get("type"), str)):
        raise CheckpointError(f"checkpoint {json_path}: 'optimizer' must be null or an object with a 'type' "
                              f"string, got {optimizer!r:.80}")
    if "run" in meta:                                       # a training loop's: its run's fields too
        _check_run(meta, os.path.dirname(json_path))
    return meta


def _from_format_1(meta):
    """A checkpoint.json of 0.2 to 0.4 as format 2 holds it (its arrays are the same): for a training run's,
    `run` (null when none was stored) names its command, `train` for the GPT trainer's (which stored no
    `objective`), and holds the phase; a history without perplexities (0.2, 0.3) gets them from its
    evaluations. Anything malformed is left for `_check_run` to name."""
    if not any(key in meta for key in TRAINER_KEYS_1):
        return meta                                         # save_checkpoint's own, with a meta of its own
    meta = dict(meta)
    command, phase, run = meta.pop("objective", "train"), meta.pop("phase", None), meta.get("run")
    if isinstance(run, dict):
        run = {"command": command, **run, **({} if phase is None else {"phase": phase})}
    meta["run"] = run
    history = meta.get("history")
    if isinstance(history, dict) and "perplexity" not in history and isinstance(history.get("eval"), list) \
            and all(isinstance(row, list) and all(type(x) in (int, float) for x in row) for row in history["eval"]):
        meta["history"] = dict(history, perplexity=[[row[0], *(perplexity(loss) for loss in row[1:])]
                                                    for row in history["eval"]])
    return meta


def _json_type(value):
    """The JSON name of a parsed value's type, for messages."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "true/false", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _requirement(directory):
    """(how messages name the checkpoint in `directory`, require(value, expected, what, description)), where
    require returns `value` if `expected(value)`, else raises CheckpointError saying what it must be."""
    where = f"checkpoint {os.path.join(directory, JSON_NAME)}"

    def require(value, expected, what, description):
        if not expected(value):
            raise CheckpointError(f"{where}: {what} must be {description}, got {value!r:.80}")
        return value
    return where, require


def _check_run(meta, directory):
    """Check the fields `TrainingLoop.save` writes (module docstring), before anything is built from them; the
    language model's (train_config, tokenizer) when the checkpoint has either.

    Raises:
        CheckpointError naming the first field that is missing or of the wrong type.
    """
    where, require = _requirement(directory)
    require(meta.get("step"), lambda v: type(v) is int and v >= 0, "'step'", "a whole number >= 0")
    run = require(meta["run"], lambda v: v is None or isinstance(v, dict), "'run'", "null or an object")
    if run is not None:
        require(run.get("command"), lambda v: isinstance(v, str), "run.command", "the name of the run's command")
        require(run.get("options"), lambda v: isinstance(v, dict), "run.options", "an object")
        require(run.get("text", {}), lambda v: isinstance(v, dict), "run.text", "an object")
        require(run.get("phase", ""), lambda v: isinstance(v, str), "run.phase", "a string")
    language_model = "train_config" in meta or "tokenizer" in meta
    if language_model:
        _check_language_model(meta, where, require)
    _check_history_and_generators(meta, require, where, ("train", "validation") if language_model else None)


def _check_language_model(meta, where, require):
    """The fields `Trainer.save` adds, which `sample` and `train --resume` rebuild the model and tokenizer from."""
    def whole(value, floor=0):
        return type(value) is int and value >= floor

    def number(value):
        return type(value) in (int, float) and math.isfinite(value)

    require(meta["model_config"].get("vocab_size"), lambda v: whole(v, 1), "model_config.vocab_size",
            "a whole number >= 1")
    config = require(meta.get("train_config"), lambda v: isinstance(v, dict), "'train_config'", "an object")
    fields = {field.name: field for field in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(config) - set(fields))
    if unknown:
        raise CheckpointError(f"{where}: train_config has fields this version does not know: {', '.join(unknown)}")
    missing = [name for name in TRAIN_CONFIG_FIELDS_0_2 if name not in config]
    if missing:
        raise CheckpointError(f"{where}: train_config lacks {', '.join(missing)}")
    checks = {int: (whole, "a whole number >= 0"), float: (number, "a finite number"),
              str: (lambda v: isinstance(v, str), "a string"), bool: (lambda v: type(v) is bool, "true or false")}
    for name, value in config.items():
        kind = fields[name].type
        if kind in checks:
            require(value, checks[kind][0], f"train_config.{name}", checks[kind][1])
    require(meta.get("tokenizer"), lambda v: v is None or (isinstance(v, dict) and isinstance(v.get("kind"), str)),
            "'tokenizer'", "null or an object with a 'kind' string")


def checkpoint_train_config(meta, directory):
    """The TrainConfig a language model's checkpoint (Trainer's) was trained with, from its checked meta;
    CheckpointError for a checkpoint of another run, which holds none."""
    if not isinstance(meta.get("train_config"), dict):
        command = (meta.get("run") or {}).get("command")
        raise CheckpointError(f"checkpoint {directory} holds no train_config: it is not a language model's run"
                              + (f" (it is a run of {command})" if command else ""))
    return TrainConfig(**meta["train_config"])


def _check_history_and_generators(meta, require, where, evaluated):
    """The training history's lists: per step (step, loss, lr) and per evaluation (eval, perplexity rows:
    [step, *one per `evaluated` name], any length when None); every generator's state in rng."""
    history = require(meta.get("history"), lambda v: isinstance(v, dict), "'history'", "an object")
    for key in ("step", "loss", "lr"):
        require(history.get(key), lambda v: isinstance(v, list) and all(type(x) in (int, float) for x in v),
                f"history.{key}", "a list of numbers")
    length = None if evaluated is None else 1 + len(evaluated)
    for key, measure in (("eval", "loss"), ("perplexity", "perplexity")):
        names = ", ".join(f"{name} {measure}" for name in evaluated) if evaluated else f"one {measure} per measure"
        require(history.get(key), lambda v: isinstance(v, list) and all(
            isinstance(row, list) and len(row) == (length or len(row)) and all(type(x) in (int, float) for x in row)
            for row in v), f"history.{key}", f"a list of [step, {names}] rows")
    rng = require(meta.get("rng"), lambda v: isinstance(v, dict), "'rng'", "an object")
    for key in rng:
        try:
            np.random.PCG64().state = rng.get(key)
        except (TypeError, ValueError, KeyError, OverflowError) as error:
            raise CheckpointError(f"{where}: rng.{key} is not the state of a PCG64 generator ({error})") from None


def checkpoint_tokenizer(meta, directory):
    """The tokenizer a checkpoint of `Trainer.save` stores (its checked meta), or CheckpointError."""
    from ..tokenizers import tokenizer_from_config

    if meta["tokenizer"] is None:
        raise CheckpointError(f"checkpoint {directory} holds no tokenizer (saved from a script without "
                              "tokenizer_config?), so text cannot be encoded or decoded with it")
    try:
        tokenizer = tokenizer_from_config(meta["tokenizer"], source=f"checkpoint {directory}: field 'tokenizer'")
    except (ValueError, TypeError, KeyError) as error:      # the tokenizer's own checks of untrusted JSON
        raise CheckpointError(f"{error} (the checkpoint's tokenizer cannot be rebuilt from it)") from None
    model_vocabulary = meta.get("model_config", {}).get("vocab_size")
    if model_vocabulary is not None and tokenizer.vocab_size != model_vocabulary:            # the model would emit ids the tokenizer cannot decode
        raise CheckpointError(f"checkpoint {directory}: its tokenizer has {tokenizer.vocab_size} tokens but its model "
                              f"{model_vocabulary} (model_config.vocab_size); they must be equal")
    return tokenizer


def _config_differences(saved, current):
    saved = {**{key: value for key, value in MODEL_CONFIG_ADDED.items() if key in current}, **saved}
    keys = sorted(set(saved) | set(current))
    return [f"{key}: checkpoint {saved.get(key)!r}, now {current.get(key)!r}"
            for key in keys if saved.get(key) != current.get(key)]


def load_checkpoint(directory, model, optimizer=None, contents=None):
    """Load parameters (and optimizer state) saved by `save_checkpoint` into existing objects.

    Everything is checked first (names, shapes, dtypes, finite weights, the optimizer's state); on any
    error nothing has been changed.

    Args:
        contents: what `read_checkpoint(directory)` returned, if the caller has already read it
            (the file is then not read, hashed or checked again).
    Returns:
        the meta dictionary (step, rng states, history, ...).
    """
    meta, arrays = read_checkpoint(directory) if contents is None else contents
    differences = _config_differences(meta["model_config"], getattr(model, "config", {}))
    if differences:
        raise CheckpointError(f"checkpoint {directory} is for a different model: " + "; ".join(differences))
    params = {name[len("param."):]: value for name, value in arrays.items() if name.startswith("param.")}
    current = dict(model.named_parameters())
    if set(params) != set(current) or any(params[n].shape != p.shape or params[n].dtype != p.dtype
                                          for n, p in current.items()):
        raise CheckpointError(f"checkpoint {directory}: parameter names, shapes or dtypes differ from {model!r}")
    for name, value in params.items():
        if np.issubdtype(value.dtype, np.inexact) and not np.isfinite(value).all():
            raise CheckpointError(f"checkpoint {directory}: parameter {name} holds NaN or infinite values "
                                  "(written by a run that diverged?); nothing loaded")
    optimizer_state = None
    if optimizer is not None:
        saved = meta.get("optimizer")
        if saved is None or saved.get("type") != optimizer.rule:
            raise CheckpointError(f"checkpoint {directory} holds optimizer {saved and saved.get('type')}, "
                                  f"not {optimizer.rule}")
        optimizer_state = {key: value for key, value in saved.items() if key != "type"}
        optimizer_state.update({name[len("optim."):]: value for name, value in arrays.items()
                                if name.startswith("optim.")})
        try:                                                # validates every buffer before writing any
            optimizer.load_state_dict(optimizer_state)
        except (KeyError, ValueError) as error:
            raise CheckpointError(f"checkpoint {directory}: optimizer state does not fit: {error}") from None
    model.load_state_dict(params)                           # names, shapes, dtypes checked above
    return meta
