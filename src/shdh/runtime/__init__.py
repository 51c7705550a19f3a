"""What every layer needs from the machine and the file system, and nothing of the method: atomic
writes, the project's error types, which device trains, the maths libraries held to one code path
on every x86-64 CPU, how many CPUs the container may use, which code made a model, progress bars.

May import: nothing of shdh.
"""
