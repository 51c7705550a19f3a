"""What every layer needs from the machine and the file system, and nothing of the method:
atomic writes (atomic), the project's error types (errors), which device trains (devices), the
maths libraries held to one code path on every x86-64 CPU (instruction_set), how many CPUs the
container may use (cpu_quota), which code made a model (source_fingerprint), progress bars
(progress), and where modules of older releases live now (moved_modules).

May import: nothing of shdh.
"""
