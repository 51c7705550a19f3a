"""The deep methods' training loop, a module per job: its settings, the epoch loop, the run's
state, one step (replayed as a CUDA graph where asked), where the images live and how a batch
reaches the device, one fit over several processes, the loss log, the probe codes, validation and
the schedule, the checkpoint file and the resume policy, and the trained network applied to
images. It knows no method: a method arrives as its objective (objective.Objective).

May import: core, nets, ranking, runtime.
"""
