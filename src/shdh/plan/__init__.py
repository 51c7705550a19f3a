"""The run plan: which fits the settings ask for, what each is called and where it lives. What a fit
is (fits); which fits a section asks for and how each is made (runs); the shallow methods' part
(shallow), which the `baselines` stage plans with alone; and the whole plan for every method
(all_methods). Pure functions of the settings.

May import: core, hashers, nets, ranking, runtime, training.
"""
