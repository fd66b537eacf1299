//! Tree reads: resolving model-facing names and listing descendants by
//! walking the parent-owned catalogs, without loading or resuming any agent.
