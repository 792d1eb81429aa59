"""Layer 10: built on jobs and batches together: ``@run`` (``decorator``), cancelling waits
on termination (``termination``) and storage garbage collection (``gc``)."""
