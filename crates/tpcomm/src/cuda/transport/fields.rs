//! What both GPU transports (`P2pTransport`, `PinnedTransport`) give over
//! their fields of the same names: the accessors and the `Debug`.

/// The accessors both GPU transports (`P2pTransport`, `PinnedTransport`)
/// give over their fields of the same names; invoked inside each one's
/// `impl`.
macro_rules! transport_accessors {
    () => {
        pub fn rank(&self) -> usize {
            self.rank
        }
        /// How the group's ranks share this rank's GPU.
        pub fn sharing(&self) -> Sharing {
            self.sharing
        }
        pub fn world(&self) -> usize {
            self.world
        }
        pub fn max_bytes(&self) -> ByteSize {
            self.max_bytes
        }
        pub fn context(&self) -> &Arc<CudaContext> {
            &self.ctx
        }
        /// Every byte this communicator took, per buffer.
        pub fn memory_report(&self) -> &MemoryReport {
            &self.report
        }
        /// For `GpuComm::new` to say in the heading why this transport was taken.
        pub(crate) fn report_mut(&mut self) -> &mut MemoryReport {
            &mut self.report
        }
        /// NVRTC version and architecture the kernels were compiled with.
        pub fn compiled_with(&self) -> ((i32, i32), (i32, i32)) {
            (self.kernels.nvrtc, self.kernels.arch)
        }
        /// What every all-reduce of this transport checks first (an earlier
        /// call's failure, then the call for `kernels`:
        /// `call::check_all_reduce`); the message's bytes.
        pub(crate) fn all_reduce_bytes(
            &self,
            kernels: &str,
            call: &crate::cuda::call::Call,
        ) -> Result<usize> {
            self.check()?;
            crate::cuda::call::check_all_reduce(kernels, call, self.max_bytes)
        }
        /// What every collective of this transport checks first (an
        /// earlier call's failure, then the call: `call::check_collective`);
        /// one rank's block in bytes, `None` for an empty call (every rank
        /// gives the same count, so every rank skips together and the epoch
        /// stays in step).
        pub(crate) fn collective_bytes(
            &self,
            what: crate::algo::Collective,
            call: &crate::cuda::call::Call,
        ) -> Result<Option<usize>> {
            self.check()?;
            let bytes =
                crate::cuda::call::check_collective(what, call, self.world(), self.max_bytes())?;
            Ok((call.count > 0).then_some(bytes))
        }
    };
}
pub(crate) use transport_accessors;

/// The `Debug` both GPU transports give: rank, world, device, max_bytes.
macro_rules! transport_debug {
    ($t:ident) => {
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($t))
                    .field("rank", &self.rank)
                    .field("world", &self.world)
                    .field("device", &self.ctx.ordinal())
                    .field("max_bytes", &self.max_bytes)
                    .finish()
            }
        }
    };
}
pub(crate) use transport_debug;
