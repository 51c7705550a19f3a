"""The deep methods' training loop, a module per job: its settings (loop_settings), the epoch loop
(loop), the run's state (state), one step (step; replayed as a CUDA graph: cuda_graph_step), where
the images live and how a batch reaches the device (batches; read ahead by loader), one fit over
several processes (distributed), the loss log (loss_log), the probe codes (probe_codes),
validation and the schedule (convergence), the checkpoint file and the resume policy
(checkpoint, written during training by checkpoint_writer), and the trained network applied to
images (inference). It knows no method: a loss arrives as a shdh.core.objectives.Loss.

May import: core, nets, ranking, runtime.
"""
