//! ptdump's packet formatting (work in progress).
