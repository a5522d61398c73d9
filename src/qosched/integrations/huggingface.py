"""A Hugging Face ``transformers.Trainer`` callback: progress to qosched, stop on its request.

    from qosched.integrations.huggingface import QoschedTrainerCallback
    trainer = Trainer(..., callbacks=[QoschedTrainerCallback()])
    trainer.train(resume_from_checkpoint=get_last_checkpoint(args.output_dir))

Each optimizer step is reported (``state.global_step``, which a resumed run restores, so it counts
from the start of the whole job) with the latest logged loss. When qosched asks the job to stop
(pre-emption, a re-size by restart, cancel), the Trainer saves a checkpoint in its
``output_dir`` and ends training; the next run resumes from it. Needs the extra
``qosched[transformers]``.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

import qosched.job
from qosched.core.renamed import earlier_names


class QoschedTrainerCallback(TrainerCallback):
    """Reports every step on the main process; turns a stop request into save-and-stop."""

    def __init__(self) -> None:
        self.loss: float | None = None

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        qosched.job.stop_requested()  # installs the SIGTERM handler before the first step

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **_: Any,
    ) -> None:
        if logs and isinstance(logs.get("loss"), int | float):
            self.loss = float(logs["loss"])

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> TrainerControl:
        if state.is_world_process_zero:
            qosched.job.report(state.global_step, loss=self.loss)
        if qosched.job.stop_requested():
            control.should_save = True
            control.should_training_stop = True
        return control


#: qosched 0.1's name, still importable (with a DeprecationWarning) by code written against it.
__getattr__ = earlier_names(__name__, globals(), {"QoschedCallback": "QoschedTrainerCallback"})
