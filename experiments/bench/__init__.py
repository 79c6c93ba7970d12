"""Speed and memory figures for the toolkit: ``python -m medmis.experiments.bench [--only SECTION]
[--quick]`` prints JSON (the sections and their targets: ``_main``'s docstring, or ``--help``).

Modules: ``_main`` (the command and the in-process sections), ``_throughput``, ``_scale`` and
``_replicas`` and ``_timings`` (one section each), ``_scale_run`` (the generated release-size run the ``scale``
section reads), ``_fake_openai`` (a local OpenAI-compatible server, also used by the tests) and
``_items`` (the synthetic rows the sections run on). Nothing is imported here: the package is a
command, not a library.
"""
