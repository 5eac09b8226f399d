//! The decoder on hand-made traces.
