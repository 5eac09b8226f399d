//! Unit tests of the packet formats.
