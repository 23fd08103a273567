"""The governance steps, one module each, in the order the pipeline runs them.

normalize (pair repair) → evict → truncate → mask → window → drop_groups → shrink.
Every step is pure: it reads the working state of one ``govern`` call and records changes in it.
"""
