"""A tiny real training run under a trainer framework, as a user's script would write it.

``python trainers.py FRAMEWORK STEPS [STOP_AT]``: trains for STEPS optimizer steps with
qosched's callback; with STOP_AT, the process sends itself SIGTERM (as qosched's runner forwards
a pre-emption) when that step ends. Runs under qosched's environment variables set by the test.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import qosched.job


def data(n: int = 64) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


def sigterm_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.05)  # let the handler run before the step returns


def run_huggingface(steps: int, stop_at: int | None) -> int:
    from transformers import Trainer, TrainerCallback, TrainingArguments
    from transformers.trainer_utils import get_last_checkpoint

    from qosched.integrations.huggingface import QoschedTrainerCallback

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(8, 1)

        def forward(self, x, labels):
            return {"loss": nn.functional.mse_loss(self.layer(x), labels)}

    class Rows(torch.utils.data.Dataset):
        def __init__(self) -> None:
            self.rows = data()

        def __len__(self) -> int:
            return len(self.rows)

        def __getitem__(self, i):
            x, y = self.rows[i]
            return {"x": x, "labels": y}

    class Stopper(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == stop_at:
                sigterm_self()

    out = str(qosched.job.checkpoint_dir() / "hf")
    args = TrainingArguments(
        output_dir=out,
        max_steps=steps,
        per_device_train_batch_size=4,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    callbacks = [Stopper(), QoschedTrainerCallback()] if stop_at else [QoschedTrainerCallback()]
    trainer = Trainer(model=Model(), args=args, train_dataset=Rows(), callbacks=callbacks)
    last = get_last_checkpoint(out) if os.path.isdir(out) else None
    trainer.train(resume_from_checkpoint=last)
    return trainer.state.global_step


def run_lightning(steps: int, stop_at: int | None) -> int:
    import lightning.pytorch as pl

    from qosched.integrations.lightning import QoschedLightningCallback

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Stopper(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == stop_at:
                sigterm_self()

    callback = QoschedLightningCallback()
    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Stopper(), callback] if stop_at else [callback],
    )
    trainer.fit(Model(), DataLoader(data(), batch_size=4), ckpt_path=callback.resume_path())
    return trainer.global_step


if __name__ == "__main__":
    framework, steps = sys.argv[1], int(sys.argv[2])
    stop_at = int(sys.argv[3]) if len(sys.argv) > 3 else None
    ended = {"huggingface": run_huggingface, "lightning": run_lightning}[framework](steps, stop_at)
    print(f"training returned at step {ended}", flush=True)
