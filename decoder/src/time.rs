//! Timing: TSC estimation from TSC/TMA/MTC/CYC/CBR (work in progress).
