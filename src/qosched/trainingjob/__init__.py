"""What a training job is wherever it runs, shared by both backends and ``qosched.job``: the
user's TrainingJob YAML (``jobspec``) and the files and environment a scheduler and a job's
runner share in its job folder (``protocol``).
"""
