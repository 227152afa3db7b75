//! `Date.parse` as the reference engine (V8) accepts it.
//!
//! The reference validators accept any date string for which ECMAScript `Date.parse` is not
//! `NaN` (`createdAt` of bindings, `generatedAt` of indexes and lockfiles). V8 is lenient: it
//! first tries the ES date-time string format (`[+-YY]YYYY[-MM[-DD]][THH:mm[:ss[.sss]][Z|±hh:mm]]`,
//! with extensions), then falls back to its legacy parser, which accepts month names,
//! `12/31/2025`, `2026/01/01`, `January 1, 2026`, RFC 2822 with `GMT`, and ignores unknown words
//! before the first number (`not a date 2026-01-01`). Day-of-month is only range-checked
//! against 1..=31 (`2026-02-30` is accepted and rolls over), and `24:00` is accepted.
//!
//! This module is a port of V8's `DateParser` (`src/date/dateparser*`) and of
//! `ParseDateTimeString` (`MakeDay`, `MakeTime`, `MakeDate`, `TimeClip`), tokenizing the
//! string as UTF-16 code units exactly as V8 does, including its oddities: a NUL code unit ends
//! the input, any code unit at or above `A` (including non-ASCII whitespace such as U+FEFF)
//! belongs to a word, and only the first three letters of a word are looked at.
//!
//! * [`date_parse`] returns the time value in milliseconds since the epoch, or `None` where
//!   JavaScript gives `NaN`.
//! * [`is_date_string`] is `!Number.isNaN(Date.parse(s))`.
//!
//! Strings without a time zone that V8 reads as local time (date-time forms of the ISO format
//! and most legacy forms) are read here as UTC: this crate does no I/O and has no time-zone
//! database. Validity is unaffected except within a few hours of the ±8.64e15 ms limits.

/// `Date.parse(s)` in milliseconds since 1970-01-01T00:00:00Z; `None` where JavaScript gives
/// `NaN`. Local-time forms are read as UTC (see the module documentation).
pub fn date_parse(s: &str) -> Option<f64> {
    let units: Vec<u16> = s.encode_utf16().collect();
    let fields = parse_fields(&units)?;
    time_value(&fields)
}

/// `true` when `Date.parse(s)` is not `NaN`.
pub fn is_date_string(s: &str) -> bool {
    date_parse(s).is_some()
}

/// `kNone`: a missing value.
const NONE: i32 = i32::MAX;
/// At most this many digits contribute to the value of a numeral; the rest are skipped.
const MAX_SIGNIFICANT_DIGITS: usize = 9;

fn between(x: i32, lo: i32, hi: i32) -> bool {
    lo <= x && x <= hi
}

fn is_month(x: i32) -> bool {
    between(x, 1, 12)
}

fn is_day(x: i32) -> bool {
    between(x, 1, 31)
}

fn is_hour(x: i32) -> bool {
    between(x, 0, 23)
}

fn is_minute(x: i32) -> bool {
    between(x, 0, 59)
}

fn is_second(x: i32) -> bool {
    between(x, 0, 59)
}

fn is_hour12(x: i32) -> bool {
    between(x, 0, 12)
}

fn is_millisecond(x: i32) -> bool {
    between(x, 0, 999)
}

/// Character-level reader over UTF-16 code units; `ch == 0` means end of input.
struct InputReader<'a> {
    buffer: &'a [u16],
    index: usize,
    ch: u32,
}

impl<'a> InputReader<'a> {
    fn new(buffer: &'a [u16]) -> Self {
        let mut reader = InputReader {
            buffer,
            index: 0,
            ch: 0,
        };
        reader.next();
        reader
    }

    fn position(&self) -> usize {
        self.index
    }

    fn next(&mut self) {
        self.ch = self.buffer.get(self.index).map_or(0, |&u| u32::from(u));
        self.index += 1;
    }

    fn read_unsigned_numeral(&mut self) -> i32 {
        let mut n: i32 = 0;
        let mut i = 0;
        while self.is_ascii_digit() {
            if i < MAX_SIGNIFICANT_DIGITS {
                // At most 9 digits: fits an i32.
                n = n * 10 + (self.ch - u32::from(b'0')) as i32;
            }
            i += 1;
            self.next();
        }
        n
    }

    /// Reads a word (code units >= `A`), fills `prefix` with its lower-cased first three code
    /// units (zero padded) and returns the word length.
    fn read_word(&mut self, prefix: &mut [u32; 3]) -> usize {
        let mut len = 0;
        while self.is_ascii_alpha_or_above() {
            if len < prefix.len() {
                prefix[len] = self.ch | 0x20;
            }
            len += 1;
            self.next();
        }
        len
    }

    fn skip(&mut self, c: u8) -> bool {
        if self.ch == u32::from(c) {
            self.next();
            true
        } else {
            false
        }
    }

    fn skip_white_space(&mut self) -> bool {
        if char::from_u32(self.ch).is_some_and(crate::js::is_js_whitespace) {
            self.next();
            true
        } else {
            false
        }
    }

    fn skip_parentheses(&mut self) -> bool {
        if self.ch != u32::from(b'(') {
            return false;
        }
        let mut balance = 0;
        loop {
            if self.ch == u32::from(b')') {
                balance -= 1;
            } else if self.ch == u32::from(b'(') {
                balance += 1;
            }
            self.next();
            if !(balance > 0 && self.ch != 0) {
                break;
            }
        }
        true
    }

    fn is_end(&self) -> bool {
        self.ch == 0
    }

    fn is_ascii_digit(&self) -> bool {
        (u32::from(b'0')..=u32::from(b'9')).contains(&self.ch)
    }

    fn is_ascii_alpha_or_above(&self) -> bool {
        self.ch >= u32::from(b'A')
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeywordType {
    Invalid,
    MonthName,
    TimeZoneName,
    TimeSeparator,
    AmPm,
}

/// V8's keyword table: a word matches when its first three letters do (month names may be
/// longer; other keywords must be exactly as long as their entry).
const KEYWORDS: [([u8; 3], KeywordType, i32); 27] = [
    (*b"jan", KeywordType::MonthName, 1),
    (*b"feb", KeywordType::MonthName, 2),
    (*b"mar", KeywordType::MonthName, 3),
    (*b"apr", KeywordType::MonthName, 4),
    (*b"may", KeywordType::MonthName, 5),
    (*b"jun", KeywordType::MonthName, 6),
    (*b"jul", KeywordType::MonthName, 7),
    (*b"aug", KeywordType::MonthName, 8),
    (*b"sep", KeywordType::MonthName, 9),
    (*b"oct", KeywordType::MonthName, 10),
    (*b"nov", KeywordType::MonthName, 11),
    (*b"dec", KeywordType::MonthName, 12),
    (*b"am\0", KeywordType::AmPm, 0),
    (*b"pm\0", KeywordType::AmPm, 12),
    (*b"ut\0", KeywordType::TimeZoneName, 0),
    (*b"utc", KeywordType::TimeZoneName, 0),
    (*b"z\0\0", KeywordType::TimeZoneName, 0),
    (*b"gmt", KeywordType::TimeZoneName, 0),
    (*b"cdt", KeywordType::TimeZoneName, -5),
    (*b"cst", KeywordType::TimeZoneName, -6),
    (*b"edt", KeywordType::TimeZoneName, -4),
    (*b"est", KeywordType::TimeZoneName, -5),
    (*b"mdt", KeywordType::TimeZoneName, -6),
    (*b"mst", KeywordType::TimeZoneName, -7),
    (*b"pdt", KeywordType::TimeZoneName, -7),
    (*b"pst", KeywordType::TimeZoneName, -8),
    (*b"t\0\0", KeywordType::TimeSeparator, 0),
];

fn lookup_keyword(prefix: &[u32; 3], len: usize) -> (KeywordType, i32) {
    for (word, kind, value) in KEYWORDS {
        let matches = word
            .iter()
            .zip(prefix.iter())
            .all(|(&w, &p)| u32::from(w) == p);
        if matches && (len <= 3 || kind == KeywordType::MonthName) {
            return (kind, value);
        }
    }
    (KeywordType::Invalid, 0)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    Invalid,
    Unknown,
    Number {
        value: i32,
        length: usize,
    },
    Symbol(u8),
    WhiteSpace,
    EndOfInput,
    Keyword {
        kind: KeywordType,
        value: i32,
        length: usize,
    },
}

impl Token {
    fn is_number(self) -> bool {
        matches!(self, Token::Number { .. })
    }

    fn number(self) -> i32 {
        match self {
            Token::Number { value, .. } => value,
            _ => 0,
        }
    }

    fn length(self) -> usize {
        match self {
            Token::Number { length, .. } | Token::Keyword { length, .. } => length,
            _ => 1,
        }
    }

    fn is_fixed_length_number(self, len: usize) -> bool {
        matches!(self, Token::Number { length, .. } if length == len)
    }

    fn is_symbol(self, c: u8) -> bool {
        self == Token::Symbol(c)
    }

    fn is_ascii_sign(self) -> bool {
        matches!(self, Token::Symbol(b'+' | b'-'))
    }

    /// 1 for `+`, -1 for `-`.
    fn ascii_sign(self) -> i32 {
        if self == Token::Symbol(b'-') { -1 } else { 1 }
    }

    fn is_keyword_type(self, wanted: KeywordType) -> bool {
        matches!(self, Token::Keyword { kind, .. } if kind == wanted)
    }

    fn is_keyword_z(self) -> bool {
        matches!(
            self,
            Token::Keyword {
                kind: KeywordType::TimeZoneName,
                value: 0,
                length: 1
            }
        )
    }
}

struct Tokenizer<'a> {
    input: InputReader<'a>,
    next: Token,
}

impl<'a> Tokenizer<'a> {
    fn new(units: &'a [u16]) -> Self {
        let mut input = InputReader::new(units);
        let next = scan(&mut input);
        Tokenizer { input, next }
    }

    fn next(&mut self) -> Token {
        let result = self.next;
        self.next = scan(&mut self.input);
        result
    }

    fn peek(&self) -> Token {
        self.next
    }

    fn skip_symbol(&mut self, c: u8) -> bool {
        if self.next.is_symbol(c) {
            self.next = scan(&mut self.input);
            true
        } else {
            false
        }
    }
}

fn scan(input: &mut InputReader<'_>) -> Token {
    let pre_pos = input.position();
    if input.is_end() {
        return Token::EndOfInput;
    }
    if input.is_ascii_digit() {
        let value = input.read_unsigned_numeral();
        let length = input.position() - pre_pos;
        return Token::Number { value, length };
    }
    for symbol in [b':', b'-', b'+', b'.', b')'] {
        if input.skip(symbol) {
            return Token::Symbol(symbol);
        }
    }
    if input.is_ascii_alpha_or_above() {
        let mut prefix = [0u32; 3];
        let length = input.read_word(&mut prefix);
        let (kind, value) = lookup_keyword(&prefix, length);
        return Token::Keyword {
            kind,
            value,
            length,
        };
    }
    if input.skip_white_space() {
        return Token::WhiteSpace;
    }
    if input.skip_parentheses() {
        return Token::Unknown;
    }
    input.next();
    Token::Unknown
}

/// `ReadMilliseconds`: the first three significant digits of a numeral.
fn read_milliseconds(token: Token) -> i32 {
    let mut number = token.number();
    let mut length = token.length();
    if length == 1 {
        number *= 100;
    } else if length == 2 {
        number *= 10;
    } else if length > 3 {
        length = length.min(MAX_SIGNIFICANT_DIGITS);
        let mut factor = 1;
        while length > 3 {
            factor *= 10;
            length -= 1;
        }
        number /= factor;
    }
    number
}

struct DayComposer {
    comp: [i32; 3],
    index: usize,
    named_month: i32,
    is_iso_date: bool,
}

impl DayComposer {
    fn new() -> Self {
        DayComposer {
            comp: [0; 3],
            index: 0,
            named_month: NONE,
            is_iso_date: false,
        }
    }

    fn is_empty(&self) -> bool {
        self.index == 0
    }

    fn add(&mut self, n: i32) -> bool {
        if self.index < self.comp.len() {
            self.comp[self.index] = n;
            self.index += 1;
            true
        } else {
            false
        }
    }

    /// (year, month 1-based, day).
    fn write(&mut self) -> Option<(i32, i32, i32)> {
        if self.index < 1 {
            return None;
        }
        while self.index < self.comp.len() {
            self.comp[self.index] = 1;
            self.index += 1;
        }
        let mut year = 0; // Default year is 0 (=> 2000) for KJS compatibility.
        let month;
        let day;
        if self.named_month == NONE {
            if self.is_iso_date || (self.index == 3 && !is_day(self.comp[0])) {
                year = self.comp[0];
                month = self.comp[1];
                day = self.comp[2];
            } else {
                month = self.comp[0];
                day = self.comp[1];
                if self.index == 3 {
                    year = self.comp[2];
                }
            }
        } else {
            month = self.named_month;
            if self.index == 1 {
                day = self.comp[0];
            } else if !is_day(self.comp[0]) {
                year = self.comp[0];
                day = self.comp[1];
            } else {
                day = self.comp[0];
                year = self.comp[1];
            }
        }
        if !self.is_iso_date {
            if between(year, 0, 49) {
                year += 2000;
            } else if between(year, 50, 99) {
                year += 1900;
            }
        }
        if !is_month(month) || !is_day(day) {
            return None;
        }
        Some((year, month, day))
    }
}

struct TimeComposer {
    comp: [i32; 4],
    index: usize,
    hour_offset: i32,
}

impl TimeComposer {
    fn new() -> Self {
        TimeComposer {
            comp: [0; 4],
            index: 0,
            hour_offset: NONE,
        }
    }

    fn is_empty(&self) -> bool {
        self.index == 0
    }

    fn is_expecting(&self, n: i32) -> bool {
        (self.index == 1 && is_minute(n))
            || (self.index == 2 && is_second(n))
            || (self.index == 3 && is_millisecond(n))
    }

    fn add(&mut self, n: i32) -> bool {
        if self.index < self.comp.len() {
            self.comp[self.index] = n;
            self.index += 1;
            true
        } else {
            false
        }
    }

    fn add_final(&mut self, n: i32) -> bool {
        if !self.add(n) {
            return false;
        }
        while self.index < self.comp.len() {
            self.comp[self.index] = 0;
            self.index += 1;
        }
        true
    }

    /// (hour, minute, second, millisecond).
    fn write(&mut self) -> Option<(i32, i32, i32, i32)> {
        while self.index < self.comp.len() {
            self.comp[self.index] = 0;
            self.index += 1;
        }
        let [mut hour, minute, second, millisecond] = self.comp;
        if self.hour_offset != NONE {
            if !is_hour12(hour) {
                return None;
            }
            hour %= 12;
            hour += self.hour_offset;
        }
        if (!is_hour(hour) || !is_minute(minute) || !is_second(second))
            || !is_millisecond(millisecond)
        {
            // A 24th hour is allowed if minutes, seconds, and milliseconds are 0.
            if hour != 24 || minute != 0 || second != 0 || millisecond != 0 {
                return None;
            }
        }
        Some((hour, minute, second, millisecond))
    }
}

struct TimeZoneComposer {
    sign: i32,
    hour: i32,
    minute: i32,
}

impl TimeZoneComposer {
    fn new() -> Self {
        TimeZoneComposer {
            sign: NONE,
            hour: NONE,
            minute: NONE,
        }
    }

    fn set(&mut self, offset_in_hours: i32) {
        self.sign = if offset_in_hours < 0 { -1 } else { 1 };
        self.hour = offset_in_hours * self.sign;
        self.minute = 0;
    }

    fn set_sign(&mut self, sign: i32) {
        self.sign = if sign < 0 { -1 } else { 1 };
    }

    fn is_expecting(&self, n: i32) -> bool {
        self.hour != NONE && self.minute == NONE && is_minute(n)
    }

    fn is_utc(&self) -> bool {
        self.hour == 0 && self.minute == 0
    }

    fn is_empty(&self) -> bool {
        self.hour == NONE
    }

    /// `Err` when the offset is out of range, `Ok(None)` when no zone was given, else the
    /// offset in seconds.
    fn write(&mut self) -> Result<Option<i32>, ()> {
        if self.sign == NONE {
            return Ok(None);
        }
        if self.hour == NONE {
            self.hour = 0;
        }
        if self.minute == NONE {
            self.minute = 0;
        }
        // Unsigned 32-bit arithmetic, as in V8.
        let total = (self.hour as u32)
            .wrapping_mul(3600)
            .wrapping_add((self.minute as u32).wrapping_mul(60));
        let total = i32::try_from(total).map_err(|_| ())?;
        Ok(Some(if self.sign < 0 { -total } else { total }))
    }
}

/// Broken-down result of the parser.
#[derive(Debug)]
struct Fields {
    year: i32,
    month: i32,
    day: i32,
    hour: i32,
    minute: i32,
    second: i32,
    millisecond: i32,
    utc_offset_seconds: Option<i32>,
}

/// `ParseES5DateTime`: returns the next token for the legacy parser, `EndOfInput` when the
/// whole string was an ES date-time string, or `Invalid` on a terminal failure.
fn parse_es5_date_time(
    scanner: &mut Tokenizer<'_>,
    day: &mut DayComposer,
    time: &mut TimeComposer,
    tz: &mut TimeZoneComposer,
) -> Token {
    // Mandatory date: [('-'|'+')yy]yyyy[':'MM[':'DD]]
    if scanner.peek().is_ascii_sign() {
        // Keep the sign token for the legacy parser if it is not used here.
        let sign_token = scanner.next();
        if !scanner.peek().is_fixed_length_number(6) {
            return sign_token;
        }
        let sign = sign_token.ascii_sign();
        let year = scanner.next().number();
        if sign < 0 && year == 0 {
            return sign_token;
        }
        day.add(sign * year);
    } else if scanner.peek().is_fixed_length_number(4) {
        day.add(scanner.next().number());
    } else {
        return scanner.next();
    }
    if scanner.skip_symbol(b'-') {
        if !scanner.peek().is_fixed_length_number(2) || !is_month(scanner.peek().number()) {
            return scanner.next();
        }
        day.add(scanner.next().number());
        if scanner.skip_symbol(b'-') {
            if !scanner.peek().is_fixed_length_number(2) || !is_day(scanner.peek().number()) {
                return scanner.next();
            }
            day.add(scanner.next().number());
        }
    }
    // Optional time: 'T'HH':'mm[':'ss['.'sss]]Z
    if !scanner.peek().is_keyword_type(KeywordType::TimeSeparator) {
        if scanner.peek() != Token::EndOfInput {
            return scanner.next();
        }
    } else {
        scanner.next();
        if !scanner.peek().is_fixed_length_number(2) || !between(scanner.peek().number(), 0, 24) {
            return Token::Invalid;
        }
        // Allow 24:00[:00[.000]], but no other time starting with 24.
        let hour_is_24 = scanner.peek().number() == 24;
        time.add(scanner.next().number());
        if !scanner.skip_symbol(b':') {
            return Token::Invalid;
        }
        if !scanner.peek().is_fixed_length_number(2)
            || !is_minute(scanner.peek().number())
            || (hour_is_24 && scanner.peek().number() > 0)
        {
            return Token::Invalid;
        }
        time.add(scanner.next().number());
        if scanner.skip_symbol(b':') {
            if !scanner.peek().is_fixed_length_number(2)
                || !is_second(scanner.peek().number())
                || (hour_is_24 && scanner.peek().number() > 0)
            {
                return Token::Invalid;
            }
            time.add(scanner.next().number());
            if scanner.skip_symbol(b'.') {
                if !scanner.peek().is_number() || (hour_is_24 && scanner.peek().number() > 0) {
                    return Token::Invalid;
                }
                // More or fewer than the mandated three digits are allowed.
                time.add(read_milliseconds(scanner.next()));
            }
        }
        // Optional zone: 'Z' | ('+'|'-')hh':'mm
        if scanner.peek().is_keyword_z() {
            scanner.next();
            tz.set(0);
        } else if scanner.peek().is_ascii_sign() {
            tz.set_sign(scanner.next().ascii_sign());
            if scanner.peek().is_fixed_length_number(4) {
                // hhmm extension syntax.
                let hourmin = scanner.next().number();
                let hour = hourmin / 100;
                let min = hourmin % 100;
                if !is_hour(hour) || !is_minute(min) {
                    return Token::Invalid;
                }
                tz.hour = hour;
                tz.minute = min;
            } else {
                // hh:mm standard syntax.
                if !scanner.peek().is_fixed_length_number(2) || !is_hour(scanner.peek().number()) {
                    return Token::Invalid;
                }
                tz.hour = scanner.next().number();
                if !scanner.skip_symbol(b':') {
                    return Token::Invalid;
                }
                if !scanner.peek().is_fixed_length_number(2) || !is_minute(scanner.peek().number())
                {
                    return Token::Invalid;
                }
                tz.minute = scanner.next().number();
            }
        }
        if scanner.peek() != Token::EndOfInput {
            return Token::Invalid;
        }
    }
    // Date-only forms without a zone are UTC; date-time forms are local time.
    if tz.is_empty() && time.is_empty() {
        tz.set(0);
    }
    day.is_iso_date = true;
    Token::EndOfInput
}

/// `DateParser::Parse`.
fn parse_fields(units: &[u16]) -> Option<Fields> {
    let mut scanner = Tokenizer::new(units);
    let mut tz = TimeZoneComposer::new();
    let mut time = TimeComposer::new();
    let mut day = DayComposer::new();

    let next_unhandled = parse_es5_date_time(&mut scanner, &mut day, &mut time, &mut tz);
    if next_unhandled == Token::Invalid {
        return None;
    }
    let mut has_read_number = !day.is_empty();
    let mut token = next_unhandled;
    while token != Token::EndOfInput {
        match token {
            Token::Number { value: n, .. } => {
                has_read_number = true;
                if scanner.skip_symbol(b':') {
                    if scanner.skip_symbol(b':') {
                        // n + "::"
                        if !time.is_empty() {
                            return None;
                        }
                        time.add(n);
                        time.add(0);
                    } else {
                        // n + ":"
                        if !time.add(n) {
                            return None;
                        }
                        if scanner.peek().is_symbol(b'.') {
                            scanner.next();
                        }
                    }
                } else if scanner.skip_symbol(b'.') && time.is_expecting(n) {
                    time.add(n);
                    if !scanner.peek().is_number() {
                        return None;
                    }
                    let ms = read_milliseconds(scanner.next());
                    if ms < 0 {
                        return None;
                    }
                    time.add_final(ms);
                } else if tz.is_expecting(n) {
                    tz.minute = n;
                } else if time.is_expecting(n) {
                    time.add_final(n);
                    // Require end, white space, "Z", "+" or "-" right after the time.
                    let peek = scanner.peek();
                    if peek != Token::EndOfInput
                        && peek != Token::WhiteSpace
                        && !peek.is_keyword_z()
                        && !peek.is_ascii_sign()
                    {
                        return None;
                    }
                } else {
                    if !day.add(n) {
                        return None;
                    }
                    scanner.skip_symbol(b'-');
                }
            }
            Token::Keyword { kind, value, .. } => {
                if kind == KeywordType::AmPm && !time.is_empty() {
                    time.hour_offset = value;
                } else if kind == KeywordType::MonthName {
                    day.named_month = value;
                    scanner.skip_symbol(b'-');
                } else if kind == KeywordType::TimeZoneName && has_read_number {
                    tz.set(value);
                } else {
                    // Garbage words are illegal once a number has been read, and the first
                    // number must be separated from garbage words.
                    if has_read_number || scanner.peek().is_number() {
                        return None;
                    }
                }
            }
            _ if token.is_ascii_sign() && (tz.is_utc() || !time.is_empty()) => {
                // UTC offset (only after UTC or a time).
                tz.set_sign(token.ascii_sign());
                // The following number may be empty.
                let mut n = 0;
                let mut length = 0;
                if scanner.peek().is_number() {
                    let number = scanner.next();
                    length = number.length();
                    n = number.number();
                }
                has_read_number = true;
                if scanner.peek().is_symbol(b':') {
                    tz.hour = n;
                    tz.minute = NONE;
                } else if length == 1 || length == 2 {
                    // Time zones like GMT-8.
                    tz.hour = n;
                    tz.minute = 0;
                } else if length == 3 || length == 4 {
                    // hhmm.
                    tz.hour = n / 100;
                    tz.minute = n % 100;
                } else {
                    return None;
                }
            }
            _ if (token.is_ascii_sign() || token.is_symbol(b')')) && has_read_number => {
                // Extra sign or ')' is illegal once a number has been read.
                return None;
            }
            _ => {
                // Other characters and white space are ignored.
            }
        }
        token = scanner.next();
    }

    let (year, month, day_of_month) = day.write()?;
    let (hour, minute, second, millisecond) = time.write()?;
    let utc_offset_seconds = tz.write().ok()?;
    Some(Fields {
        year,
        month,
        day: day_of_month,
        hour,
        minute,
        second,
        millisecond,
        utc_offset_seconds,
    })
}

const MS_PER_DAY: f64 = 86_400_000.0;
/// ±100,000,000 days: the ECMAScript time value range.
const MAX_TIME_MS: f64 = 864.0e13;
/// The range allowed for a local time before its conversion to UTC (10 days wider).
const MAX_TIME_BEFORE_UTC_MS: f64 = MAX_TIME_MS + 864_000_000.0;

/// `MakeDay(year, month0, date)` for the parser's integral fields.
fn make_day(year: i32, month0: i32, date: i32) -> Option<f64> {
    if !(-1_000_000..=1_000_000).contains(&year) {
        return None;
    }
    let y = i64::from(year) + i64::from(month0.div_euclid(12));
    let m = month0.rem_euclid(12) as u32 + 1;
    let days = crate::js::days_from_civil(y, m, 1);
    Some(days as f64 + f64::from(date) - 1.0)
}

/// `ParseDateTimeString` after a successful parse: `MakeDate`, the range checks and
/// `TimeClip`.
fn time_value(f: &Fields) -> Option<f64> {
    let day = make_day(f.year, f.month - 1, f.day)?;
    let time = f64::from(f.hour) * 3_600_000.0
        + f64::from(f.minute) * 60_000.0
        + f64::from(f.second) * 1000.0
        + f64::from(f.millisecond);
    let mut date = day * MS_PER_DAY + time;
    match f.utc_offset_seconds {
        None => {
            if !(-MAX_TIME_BEFORE_UTC_MS..=MAX_TIME_BEFORE_UTC_MS).contains(&date) {
                return None;
            }
            // Local time is read as UTC (see the module documentation).
        }
        Some(offset) => {
            date -= f64::from(offset) * 1000.0;
            if !(-MAX_TIME_MS..=MAX_TIME_MS).contains(&date) {
                return None;
            }
        }
    }
    // TimeClip.
    if !date.is_finite() || date.abs() > MAX_TIME_MS {
        return None;
    }
    Some(date.trunc() + 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(y: i64, m: u32, d: u32, h: i64, mi: i64, s: i64, milli: i64) -> f64 {
        (crate::js::days_from_civil(y, m, d) * 86_400_000
            + h * 3_600_000
            + mi * 60_000
            + s * 1000
            + milli) as f64
    }

    #[test]
    fn iso_format_values() {
        assert_eq!(date_parse("1970-01-01T00:00:00.000Z"), Some(0.0));
        assert_eq!(
            date_parse("2026-01-01T00:00:00.000Z"),
            Some(ms(2026, 1, 1, 0, 0, 0, 0))
        );
        assert_eq!(date_parse("2026"), Some(ms(2026, 1, 1, 0, 0, 0, 0)));
        assert_eq!(
            date_parse("2026-01-01T00:00:00+02:00"),
            Some(ms(2025, 12, 31, 22, 0, 0, 0))
        );
        assert_eq!(
            date_parse("2026-01-01T00:00:00.000+05:30"),
            Some(ms(2025, 12, 31, 18, 30, 0, 0))
        );
        assert_eq!(
            date_parse("2026-01-01T00:00:00+0000"),
            Some(ms(2026, 1, 1, 0, 0, 0, 0))
        );
        assert_eq!(
            date_parse("2026-01-01T00:00:00.123456Z"),
            Some(ms(2026, 1, 1, 0, 0, 0, 123))
        );
        assert_eq!(
            date_parse("2026-01-01T00:00:00.5Z"),
            Some(ms(2026, 1, 1, 0, 0, 0, 500))
        );
        assert_eq!(
            date_parse("2026-01-01t00:00:00z"),
            Some(ms(2026, 1, 1, 0, 0, 0, 0))
        );
        assert_eq!(
            date_parse("+002026-01-01T00:00:00Z"),
            Some(ms(2026, 1, 1, 0, 0, 0, 0))
        );
        assert_eq!(
            date_parse("-000001-01-01T00:00:00Z"),
            Some(ms(-1, 1, 1, 0, 0, 0, 0))
        );
        assert_eq!(
            date_parse("0000-01-01T00:00:00Z"),
            Some(ms(0, 1, 1, 0, 0, 0, 0))
        );
    }

    #[test]
    fn lenient_forms_roll_over_and_accept_hour_24() {
        assert_eq!(date_parse("2026-02-30"), Some(ms(2026, 3, 2, 0, 0, 0, 0)));
        assert_eq!(
            date_parse("2026-06-31T00:00:00Z"),
            Some(ms(2026, 7, 1, 0, 0, 0, 0))
        );
        assert_eq!(
            date_parse("2026-02-29T00:00:00Z"),
            Some(ms(2026, 3, 1, 0, 0, 0, 0))
        );
        assert_eq!(
            date_parse("2026-01-01T24:00:00Z"),
            Some(ms(2026, 1, 2, 0, 0, 0, 0))
        );
    }

    #[test]
    fn legacy_forms() {
        let jan1 = Some(ms(2026, 1, 1, 0, 0, 0, 0));
        assert_eq!(date_parse("Tue, 01 Jan 2026 00:00:00 GMT"), jan1);
        assert_eq!(date_parse("January 1, 2026"), jan1);
        assert_eq!(date_parse("Thu Jan 01 2026"), jan1);
        assert_eq!(date_parse("2026/01/01"), jan1);
        assert_eq!(date_parse("2026-01-01 00:00:00"), jan1);
        assert_eq!(date_parse("2026-01-01T00:00"), jan1);
        assert_eq!(date_parse("not a date 2026-01-01"), jan1);
        assert_eq!(date_parse("12/31/2025"), Some(ms(2025, 12, 31, 0, 0, 0, 0)));
        // A lone small number is a month (KJS compatibility): 2001-01-01 and 2000-01-01.
        assert_eq!(date_parse("1"), Some(ms(2001, 1, 1, 0, 0, 0, 0)));
        assert_eq!(date_parse("0"), Some(ms(2000, 1, 1, 0, 0, 0, 0)));
        assert_eq!(
            date_parse("Jan 1 2026 10:30 pm GMT+0130"),
            Some(ms(2026, 1, 1, 21, 0, 0, 0))
        );
        // Only the first three letters of a word count: "junk" is June.
        assert_eq!(date_parse("2026 junk"), Some(ms(2026, 6, 1, 0, 0, 0, 0)));
        assert_eq!(
            date_parse("1 January 2026 (a comment) 12:00 EST"),
            Some(ms(2026, 1, 1, 17, 0, 0, 0))
        );
    }

    #[test]
    fn rejected_strings() {
        for s in [
            "",
            " ",
            "\t",
            "\u{feff}",
            "x",
            "nope",
            "20260101",
            "31/12/2025",
            "2026-01-01T00:00:00 Z",
            "2026-01-01T00:00:00.000Zjunk",
            "2026-01-01T00:00:00.Z",
            "2026-01-01T23:59:60Z",
            "2026-01-01T25:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-01-01T00:00:00+24:00",
            "2026-01-01T24:00:01Z",
            "-000000-01-01T00:00:00Z",
            "275761-01-01",
            "+275760-09-13T00:00:00.001Z",
            "a1 2026",
            "2026 xyz",
        ] {
            assert_eq!(date_parse(s), None, "{s:?}");
        }
    }

    #[test]
    fn time_clip_limits() {
        assert_eq!(date_parse("+275760-09-13T00:00:00.000Z"), Some(8.64e15));
        assert_eq!(date_parse("-271821-04-20T00:00:00.000Z"), Some(-8.64e15));
        assert_eq!(date_parse("-271821-04-19T23:59:59.999Z"), None);
    }

    #[test]
    fn nul_ends_the_input() {
        assert_eq!(
            date_parse("2026-01-01\u{0}junk"),
            Some(ms(2026, 1, 1, 0, 0, 0, 0))
        );
    }
}
