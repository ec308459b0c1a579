"""The all-MiniLM-L6-v2 encoder as an ONNX Runtime session, exported once into a cache dir.

``OnnxEncoder.load(torch_encoder, quantize, threads)`` returns a session that computes the
same last hidden state as ``policies.semantic.bert_forward.bert_last_hidden_state``. On first
use the loaded ``BertModel`` is exported with ``torch.onnx`` (dynamic batch and token axes)
and, for ``quantize``, converted to dynamic int8 by ``onnxruntime.quantization``; both files
are written atomically under ``cache_directory()`` and named by a digest of the model files,
the torch and onnxruntime versions, and this module's ``EXPORT_FORMAT`` (an encoder
fine-tuned by ``policies.semantic.fine_tune``: by its weights file's name, a digest that
covers the same), so a later start (or another process) reuses them and a new model or
library version exports afresh.

ONNX Runtime runs sequentially on ``threads`` intra-op threads with every graph optimisation
on. Its dynamic int8 quantizes activations per tensor, so (as with torch's) a text's vector
depends on its batch-mates: the embedder runs int8 texts one at a time.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

EXPORT_FORMAT = "bert-last-hidden-v1"
OPSET = 17
CACHE_ENV = "KVROUTE_CACHE_DIR"


def cache_directory() -> Path:
    """``$KVROUTE_CACHE_DIR/semantic``, else ``kvroute/semantic`` under ``$XDG_CACHE_HOME``
    or ``~/.cache``."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured) / "semantic"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kvroute" / "semantic"


def model_digest(model_dir: Path) -> str:
    """Digest of the model's weight and config files plus the exporting library versions."""
    import onnxruntime
    import torch

    digest = hashlib.blake2b(digest_size=12)
    for name in ("config.json", "model.safetensors", "pytorch_model.bin"):
        path = model_dir / name
        if path.is_file():
            digest.update(name.encode())
            digest.update(hashlib.blake2b(path.read_bytes(), digest_size=16).digest())
    digest.update(f"{torch.__version__}|{onnxruntime.__version__}|{EXPORT_FORMAT}".encode())
    return digest.hexdigest()


class OnnxEncoder:
    """``run(input_ids, attention_mask)`` → last hidden state (batch, tokens, 384), float32."""

    def __init__(self, session: Any, path: Path) -> None:
        self._session = session
        self.path = path

    @classmethod
    def load(cls, torch_encoder: Any, model_dir: Path, *, quantize: bool, threads: int,
             cache_dir: Path | None = None, weights: Path | None = None) -> OnnxEncoder:
        """``weights``: the fine-tuned weights file ``torch_encoder`` was loaded with
        (``policies.semantic.fine_tune``); its name, a digest that covers the base model
        and the library versions, names the exported files."""
        import onnxruntime

        directory = cache_dir or cache_directory()
        stem = weights.stem if weights is not None else f"minilm-{model_digest(model_dir)}"
        fp32_path = directory / f"{stem}-fp32.onnx"
        if not fp32_path.is_file():
            write_atomically(fp32_path, lambda tmp: _export(torch_encoder, tmp))
        path = fp32_path
        if quantize:
            path = fp32_path.with_name(fp32_path.name.replace("-fp32", "-int8"))
            if not path.is_file():
                write_atomically(path, lambda tmp: _quantize(fp32_path, tmp))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        session = onnxruntime.InferenceSession(str(path), options,
                                               providers=["CPUExecutionProvider"])
        return cls(session, path)

    def run(self, input_ids: npt.NDArray[np.int64],
            attention_mask: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        outputs = self._session.run(None, {"input_ids": input_ids,
                                           "attention_mask": attention_mask})
        hidden: npt.NDArray[np.float32] = outputs[0]
        return hidden


def write_atomically(path: Path, write: Any) -> None:
    """Write via ``write(tmp_path)`` next to ``path``, then rename: no reader sees half a file.
    The file gets the mode any file made here would (a temporary file's is 0600: a cache
    built into an image as root was unreadable to the router running as another user)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(prefix=path.stem, suffix=".tmp", dir=path.parent)
    os.close(handle)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        tmp.chmod(0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _umask() -> int:
    """The process's file-mode mask (read by setting it: put back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _export(torch_encoder: Any, target: Path) -> None:
    import torch

    from policies.semantic.bert_forward import bert_last_hidden_state

    class LastHiddenState(torch.nn.Module):
        def __init__(self, encoder: Any) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return bert_last_hidden_state(self.encoder, input_ids, attention_mask)

    ids = torch.ones((2, 12), dtype=torch.int64)
    mask = torch.ones((2, 12), dtype=torch.int64)
    mask[1, 7:] = 0
    axes = {0: "batch", 1: "tokens"}
    with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(LastHiddenState(torch_encoder).eval(), (ids, mask), str(target),
                          input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"], opset_version=OPSET,
                          dynamic_axes={"input_ids": axes, "attention_mask": axes,
                                        "last_hidden_state": axes}, dynamo=False)


def _quantize(source: Path, target: Path) -> None:
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    quant_log = logging.getLogger()
    level = quant_log.level
    quant_log.setLevel(logging.ERROR)   # its advice to pre-process is for static quantization
    try:
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)
    finally:
        quant_log.setLevel(level)
