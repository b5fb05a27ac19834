//! The JAX oracle: one long-lived `python scripts/jax_oracle.py` process,
//! spoken to in JSON lines (one request, one answer), so JAX is imported
//! once per test run. The JSON here is the little the protocol needs: the
//! requests are written by hand, the answers read by a small parser.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

pub struct Oracle {
    python: String,
    script: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
    pub version: String,
}

/// How an error of [`Oracle::run`] starts when the oracle process died
/// (XLA aborts the process on some of its own internal check failures).
pub const DIED: &str = "the oracle process died: ";

/// One output leaf: its shape and values.
pub type Leaf = (Vec<usize>, Vec<f64>);

impl Oracle {
    /// Starts the oracle with `python`, waiting for its ready line.
    pub fn start(python: &str, script: &str) -> Result<Oracle, String> {
        let mut child = Command::new(python)
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {python} {script}: {e}"))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut o = Oracle {
            python: python.to_string(),
            script: script.to_string(),
            child,
            stdin,
            stdout,
            next_id: 0,
            version: String::new(),
        };
        let ready = o.read_line()?;
        match parse(&ready)?.get("ready") {
            Some(Json::Str(v)) => o.version = v.clone(),
            _ => return Err(format!("the oracle did not say it was ready: {ready}")),
        }
        Ok(o)
    }

    fn read_line(&mut self) -> Result<String, String> {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).map_err(|e| format!("{DIED}reading from the oracle: {e}"))?;
        if n == 0 {
            return Err(format!("{DIED}the oracle exited (see its stderr above)"));
        }
        Ok(line)
    }

    /// A new oracle process in place of this one (after XLA aborted it).
    pub fn restart(&mut self) -> Result<(), String> {
        *self = Oracle::start(&self.python.clone(), &self.script.clone())?;
        Ok(())
    }

    /// Runs `src` (defining `run(xs)`) on `inputs`, under `jax.jit` unless
    /// `eager`; `Err` carries the Python traceback or a protocol failure.
    pub fn run(&mut self, src: &str, inputs: &[Leaf], eager: bool) -> Result<Vec<Leaf>, String> {
        self.next_id += 1;
        let id = self.next_id;
        let ins: Vec<String> = inputs
            .iter()
            .map(|(s, d)| {
                let d: Vec<String> = d.iter().map(|v| number(*v)).collect();
                format!("{{\"shape\": {s:?}, \"data\": [{}]}}", d.join(", "))
            })
            .collect();
        let req = format!(
            "{{\"id\": {id}, \"src\": {}, \"inputs\": [{}], \"eager\": {eager}}}\n",
            string(src),
            ins.join(", ")
        );
        self.stdin
            .write_all(req.as_bytes())
            .and_then(|_| self.stdin.flush())
            .map_err(|e| format!("{DIED}writing to the oracle: {e}"))?;
        let line = self.read_line()?;
        let ans = parse(&line)?;
        if ans.get("id") != Some(&Json::Num(id as f64)) {
            return Err(format!("the oracle answered another request: {line}"));
        }
        if let Some(Json::Str(e)) = ans.get("error") {
            return Err(e.clone());
        }
        let Some(Json::Arr(outs)) = ans.get("outputs") else {
            return Err(format!("no outputs in the oracle's answer: {line}"));
        };
        outs.iter()
            .map(|o| {
                let nums = |k: &str| match o.get(k) {
                    Some(Json::Arr(v)) => v
                        .iter()
                        .map(|x| if let Json::Num(n) = x { Ok(*n) } else { Err(format!("{k}: not a number")) })
                        .collect::<Result<Vec<f64>, String>>(),
                    _ => Err(format!("output without {k}")),
                };
                Ok((nums("shape")?.into_iter().map(|v| v as usize).collect(), nums("data")?))
            })
            .collect()
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A JSON number, with Python's spellings for the non-finite values.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        }
    } else {
        format!("{v:?}")
    }
}

fn string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out += "\\\"",
            '\\' => out += "\\\\",
            '\n' => out += "\\n",
            '\t' => out += "\\t",
            c if (c as u32) < 0x20 => out += &format!("\\u{:04x}", c as u32),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(kv) => kv.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// Parses one JSON value (with NaN, Infinity and -Infinity, as Python writes them).
pub fn parse(s: &str) -> Result<Json, String> {
    let b = s.trim().as_bytes();
    let mut p = 0;
    let v = value(b, &mut p)?;
    if p != b.len() {
        return Err(format!("trailing characters in the oracle's answer: {s}"));
    }
    Ok(v)
}

fn ws(b: &[u8], p: &mut usize) {
    while *p < b.len() && b[*p].is_ascii_whitespace() {
        *p += 1;
    }
}

fn eat(b: &[u8], p: &mut usize, lit: &str) -> bool {
    if b[*p..].starts_with(lit.as_bytes()) {
        *p += lit.len();
        true
    } else {
        false
    }
}

fn value(b: &[u8], p: &mut usize) -> Result<Json, String> {
    ws(b, p);
    let bad = |p: usize| {
        format!("bad JSON from the oracle at byte {p}: {}", String::from_utf8_lossy(&b[p..b.len().min(p + 40)]))
    };
    if *p >= b.len() {
        return Err(bad(*p));
    }
    let v = match b[*p] {
        b'{' => {
            *p += 1;
            let mut kv = Vec::new();
            ws(b, p);
            if !eat(b, p, "}") {
                loop {
                    ws(b, p);
                    let Json::Str(k) = value(b, p)? else { return Err(bad(*p)) };
                    ws(b, p);
                    if !eat(b, p, ":") {
                        return Err(bad(*p));
                    }
                    kv.push((k, value(b, p)?));
                    ws(b, p);
                    if eat(b, p, "}") {
                        break;
                    }
                    if !eat(b, p, ",") {
                        return Err(bad(*p));
                    }
                }
            }
            Json::Obj(kv)
        }
        b'[' => {
            *p += 1;
            let mut v = Vec::new();
            ws(b, p);
            if !eat(b, p, "]") {
                loop {
                    v.push(value(b, p)?);
                    ws(b, p);
                    if eat(b, p, "]") {
                        break;
                    }
                    if !eat(b, p, ",") {
                        return Err(bad(*p));
                    }
                }
            }
            Json::Arr(v)
        }
        b'"' => {
            *p += 1;
            let mut out: Vec<u8> = Vec::new();
            loop {
                if *p >= b.len() {
                    return Err(bad(*p));
                }
                let c = b[*p];
                *p += 1;
                match c {
                    b'"' => break,
                    b'\\' => {
                        let e = *b.get(*p).ok_or_else(|| bad(*p))?;
                        *p += 1;
                        match e {
                            b'n' => out.push(b'\n'),
                            b't' => out.push(b'\t'),
                            b'r' => out.push(b'\r'),
                            b'b' => out.push(8),
                            b'f' => out.push(12),
                            b'u' => {
                                let hex = std::str::from_utf8(b.get(*p..*p + 4).ok_or_else(|| bad(*p))?)
                                    .map_err(|_| bad(*p))?;
                                let code = u32::from_str_radix(hex, 16).map_err(|_| bad(*p))?;
                                *p += 4;
                                let ch = char::from_u32(code).unwrap_or('\u{fffd}');
                                out.extend_from_slice(ch.to_string().as_bytes());
                            }
                            other => out.push(other),
                        }
                    }
                    c => out.push(c),
                }
            }
            Json::Str(String::from_utf8_lossy(&out).into_owned())
        }
        _ if eat(b, p, "null") => Json::Null,
        _ if eat(b, p, "true") => Json::Bool(true),
        _ if eat(b, p, "false") => Json::Bool(false),
        _ if eat(b, p, "NaN") => Json::Num(f64::NAN),
        _ if eat(b, p, "Infinity") => Json::Num(f64::INFINITY),
        _ if eat(b, p, "-Infinity") => Json::Num(f64::NEG_INFINITY),
        _ => {
            let start = *p;
            while *p < b.len() && matches!(b[*p], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
                *p += 1;
            }
            let t = std::str::from_utf8(&b[start..*p]).map_err(|_| bad(start))?;
            Json::Num(t.parse().map_err(|_| bad(start))?)
        }
    };
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_oracle_answers() {
        let a = parse(
            r#"{"id": 3, "outputs": [{"shape": [2], "data": [1.5, -2e-3]}], "x": [NaN, -Infinity, "a\"\n\u00e9"]}"#,
        )
        .unwrap();
        assert_eq!(a.get("id"), Some(&Json::Num(3.0)));
        let Some(Json::Arr(x)) = a.get("x") else { panic!("no x") };
        assert!(matches!(x[0], Json::Num(n) if n.is_nan()));
        assert_eq!(x[1], Json::Num(f64::NEG_INFINITY));
        assert_eq!(x[2], Json::Str("a\"\né".into()));
        assert_eq!(
            a.get("outputs"),
            Some(&Json::Arr(vec![Json::Obj(vec![
                ("shape".into(), Json::Arr(vec![Json::Num(2.0)])),
                ("data".into(), Json::Arr(vec![Json::Num(1.5), Json::Num(-2e-3)])),
            ])]))
        );
        assert_eq!(string("a\"b\\\n"), r#""a\"b\\\n""#);
        assert_eq!(number(f64::NAN), "NaN");
        assert!(parse("{\"a\": }").is_err());
    }
}
