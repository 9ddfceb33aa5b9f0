//! A hostile planner for the sandbox tests. It implements the real `fleet-planner`
//! world, and misbehaves as the request asks: `loop`, `alloc`, `trap`,
//! `huge <bytes>` (a result of that size, written a MiB at a time and never held),
//! `forge <method>` (invoke a method the planner must not reach), or `caller`.

#[cfg(target_arch = "wasm32")]
#[expect(unsafe_code, reason = "the canonical ABI glue that wit-bindgen generates")]
mod component {
    wit_bindgen::generate!({ world: "fleet-planner", path: "../../wit" });

    use compute::fleet::{methods, output, state, types};
    use exports::compute::fleet::planner::Guest;

    struct Hostile;

    export!(Hostile);

    impl Guest for Hostile {
        fn export(request: String) -> Result<(), types::Error> {
            output::write(misbehave(&request)?.as_bytes());
            Ok(())
        }

        fn plan(request: String) -> Result<(), types::Error> {
            output::write(misbehave(&request)?.as_bytes());
            Ok(())
        }

        fn apply(request: String) -> Result<(), types::Error> {
            output::write(misbehave(&request)?.as_bytes());
            Ok(())
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
            ("huge", size) => {
                let mut left: usize = size.parse().unwrap_or(1 << 20);
                let chunk = vec![b'x'; 1 << 20];
                output::write(b"\"");
                while left > 0 {
                    let part = left.min(chunk.len());
                    output::write(&chunk[..part]);
                    left -= part;
                }
                Ok("\"".to_owned())
            }
            ("trap", _) => core::arch::wasm32::unreachable(),
            ("forge", rest) => {
                let (method, input) = rest.split_once(' ').unwrap_or((rest, "{}"));
                methods::invoke(method, input).map(|output| output.to_string())
            }
            ("caller", _) => {
                let caller = state::current_caller();
                let objects = super::objects(&state::snapshot()).ok_or_else(|| types::Error {
                    code: types::ErrorCode::Internal,
                    message: "the state encoding did not parse".into(),
                    details: String::new(),
                })?;
                Ok(format!(
                    "{{\"tenant\":\"{}\",\"principal\":\"{}\",\"objects\":{objects}}}",
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

/// The number of objects in a state encoding (`wit/fleet.wit`), read without the
/// planner's decoder: a guest of this world reads it on its own.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code, reason = "only the component calls it"))]
fn objects(bytes: &[u8]) -> Option<u32> {
    let mut at = 1;
    let u32_at = |at: &mut usize| -> Option<u32> {
        let value = u32::from_le_bytes(bytes.get(*at..*at + 4)?.try_into().ok()?);
        *at += 4;
        Some(value)
    };
    let skip_text = |at: &mut usize, length: u32| *at += length as usize;
    for _ in 0..u32_at(&mut at)? {
        let length = u32_at(&mut at)?;
        skip_text(&mut at, length);
    }
    let mut objects = 0;
    for _ in 0..u32_at(&mut at)? {
        let length = u32_at(&mut at)?;
        skip_text(&mut at, length);
        for _ in 0..u32_at(&mut at)? {
            let length = u32_at(&mut at)?;
            skip_text(&mut at, length);
        }
        for _ in 0..u32_at(&mut at)? {
            objects += 1;
            for _ in 0..u32_at(&mut at)? {
                u32_at(&mut at)?;
                let tag = *bytes.get(at)?;
                at += 1;
                match tag {
                    0 => {
                        let length = u32_at(&mut at)?;
                        skip_text(&mut at, length);
                    }
                    1 => at += 8,
                    2 => at += 1,
                    _ => {
                        for _ in 0..u32_at(&mut at)? * 2 {
                            let length = u32_at(&mut at)?;
                            skip_text(&mut at, length);
                        }
                    }
                }
            }
        }
    }
    Some(objects)
}
