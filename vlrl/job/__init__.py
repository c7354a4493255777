"""The end-to-end training job (``vlrl train``) and what a user watches: the progress line,
metrics (JSONL and TensorBoard), held-out evaluation with annotated episodes, and plots."""

from vlrl.job.demos import WarmStart
from vlrl.job.evaluate import Evaluation
from vlrl.job.train_job import TrainJob

__all__ = ["Evaluation", "TrainJob", "WarmStart"]
