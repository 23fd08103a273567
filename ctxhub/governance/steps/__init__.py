"""The governance steps, one module each, in the order the pipeline runs them.

normalize (pair repair) → evict and truncate (``cap``, applied to a message when its tokens are
needed; the texts come from ``evict`` and ``truncate``) → mask → window → drop_groups → dedupe
→ shrink. Every step is pure: it reads the working state of one ``govern`` call and records
changes in it.
"""
