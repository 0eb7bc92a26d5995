"""The conformance suite: targets judged against the spec.

Its folders are its layers (the docs' architecture page is generated from them): the
framework that finds and loads targets (:mod:`.targets`), the engine plugins
(:mod:`.engines`), the machines that run a target beside the spec (:mod:`.machines`), the
search they share (:mod:`.search`), the formats and protocols (:mod:`.trace`, :mod:`.wire`,
:mod:`.consumers`, :mod:`.profiles`), and the tools built on them (:mod:`.tools`)."""
