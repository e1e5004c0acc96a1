//! What the UCX test binaries share: running each specification over both transports.

/// Runs a specification once over TCP and once over shared memory.
macro_rules! over_tcp_and_shm {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use super::*;
            #[test]
            fn tcp() {
                super::$name(Transports::Tcp)
            }
            #[test]
            fn shm() {
                super::$name(Transports::SharedMemory)
            }
        }
    )*};
}
