"""The assembly floor: what turns the domain packages (envs, rewards, judges, catalog, memory,
llm) into the parts a run is built from — the data (:mod:`.data`), endpoints (:mod:`.endpoints`),
the judge (:mod:`.judging`), the reward spec (:mod:`.reward_spec`), the shared settings groups
(:mod:`.settings`) and the Ray cluster (:mod:`.cluster`). The runners, the service and the
trainers build on it; it imports nothing above it (docs/architecture.md, layers)."""
