"""A PyTorch Lightning callback: progress to qosched, a checkpoint when qosched stops the job.

    from qosched.integrations.lightning import QoschedLightningCallback
    callback = QoschedLightningCallback()
    trainer = L.Trainer(..., callbacks=[callback])
    trainer.fit(model, data, ckpt_path=callback.resume_path())

Each training batch that ends is reported (``trainer.global_step``, restored on resume, so it
counts from the start of the whole job) with its loss. Lightning handles SIGTERM itself: it
finishes the batch, then raises ``SIGTERMException`` and the process exits non-zero. Before that,
this callback saves a checkpoint to ``checkpoint_path`` (default: ``lightning.ckpt`` in the job's
folder), so the next run resumes where this one stopped. Needs the extra ``qosched[lightning]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl

import qosched.job
from qosched.core.renamed import earlier_names

#: The checkpoint's file name inside the job's folder when no path is given.
CHECKPOINT_NAME = "lightning.ckpt"


class QoschedLightningCallback(pl.Callback):
    """Reports every batch on global rank 0; saves a checkpoint when SIGTERM arrived."""

    def __init__(self, checkpoint_path: str | Path | None = None) -> None:
        folder = qosched.job.checkpoint_dir()
        if checkpoint_path is None and folder is not None:
            checkpoint_path = folder / CHECKPOINT_NAME
        self.checkpoint_path = Path(checkpoint_path) if checkpoint_path is not None else None

    def resume_path(self) -> str | None:
        """The checkpoint to pass as ``Trainer.fit(ckpt_path=...)``: None on a first run."""
        path = self.checkpoint_path
        return str(path) if path is not None and path.is_file() else None

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if trainer.is_global_zero:
            qosched.job.report(trainer.global_step, loss=_loss_of(outputs))
        if trainer.received_sigterm and self.checkpoint_path is not None:
            # Lightning raises SIGTERMException right after this hook; save first (on every
            # rank: saving is collective under some strategies).
            trainer.save_checkpoint(self.checkpoint_path)


def _loss_of(outputs: Any) -> float | None:
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    try:
        return float(loss)
    except (TypeError, ValueError, RuntimeError):
        return None


#: qosched 0.1's name, still importable (with a DeprecationWarning) by code written against it.
__getattr__ = earlier_names(__name__, globals(), {"QoschedCallback": "QoschedLightningCallback"})
