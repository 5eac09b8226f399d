//! A yasm-syntax assembler built on iced-x86 (work in progress).
