//! A hostile planner for the sandbox tests. It implements the real `fleet-planner`
//! world, and misbehaves as the request asks: `loop`, `alloc`, `huge`, `trap`,
//! `forge <method>` (invoke a method the planner must not reach), or `caller`.

#[cfg(target_arch = "wasm32")]
#[expect(unsafe_code, reason = "the canonical ABI glue that wit-bindgen generates")]
mod component {
    wit_bindgen::generate!({ world: "fleet-planner", path: "../../wit" });

    use compute::fleet::{methods, state, types};
    use exports::compute::fleet::planner::Guest;

    struct Hostile;

    export!(Hostile);

    impl Guest for Hostile {
        fn export(request: String) -> Result<String, types::Error> {
            misbehave(&request)
        }

        fn plan(request: String) -> Result<String, types::Error> {
            misbehave(&request)
        }

        fn apply(request: String) -> Result<String, types::Error> {
            misbehave(&request)
        }
    }

    fn misbehave(request: &str) -> Result<String, types::Error> {
        match request.split_once(' ').unwrap_or((request, "")) {
            ("loop", _) => {
                let mut counter = 0u64;
                loop {
                    counter = std::hint::black_box(counter.wrapping_add(1));
                }
            }
            ("alloc", _) => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            ("huge", size) => Ok(format!("\"{}\"", "x".repeat(size.parse().unwrap_or(1 << 20)))),
            ("trap", _) => core::arch::wasm32::unreachable(),
            ("forge", rest) => {
                let (method, input) = rest.split_once(' ').unwrap_or((rest, "{}"));
                methods::invoke(method, input).map(|output| output.to_string())
            }
            ("caller", _) => {
                let caller = state::current_caller();
                let sites = state::sites().len();
                Ok(format!(
                    "{{\"tenant\":\"{}\",\"principal\":\"{}\",\"sites\":{sites}}}",
                    caller.tenant, caller.principal
                ))
            }
            _ => Err(types::Error {
                code: types::ErrorCode::InvalidArgument,
                message: format!("unknown misbehaviour {request:?}"),
                details: String::new(),
            }),
        }
    }
}
