//! Records a dead process's journal holds but its store cannot read back are kept in
//! quarantine byte for byte, named in the recovery's report and counted; never deleted with
//! the journal, never written twice, never overwritten.

use std::fs;
use std::path::Path;

use capability_journal::{RecoverError, Recovery, json_nesting, quarantine, recover};

/// A reader that takes lines starting with `ok` and refuses the others.
fn ok_lines(line: &str) -> Result<String, String> {
    if line.starts_with("ok") {
        Ok(line.to_string())
    } else {
        Err(format!("not a record: {} bytes", line.len()))
    }
}

/// Recovers `dir` with [`ok_lines`]; returns the report and what was committed.
fn recover_ok(dir: &Path) -> (Recovery, Vec<String>) {
    let mut committed = Vec::new();
    let r = recover(dir, "t", ok_lines, |records| {
        committed.extend(records);
        Ok::<(), String>(())
    })
    .unwrap();
    (r, committed)
}

#[test]
fn unreadable_lines_are_kept_byte_for_byte_and_the_readable_ones_committed() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("t-7-dead.jsonl");
    // A refused line, a line that is not UTF-8 in the middle (today it ends the replay and
    // every record after it is lost), a refused line with a carriage return, and a torn
    // last line.
    let mut bytes = Vec::new();
    bytes.extend_from_slice(b"ok first\n");
    bytes.extend_from_slice(b"{\"bad\": [[[\n");
    bytes.extend_from_slice(b"\xff\xfe not utf-8 \xc3\n");
    bytes.extend_from_slice(b"ok after the bad ones\n");
    bytes.extend_from_slice(b"\n"); // an empty line: no record
    bytes.extend_from_slice(b"bad with cr\r\n");
    bytes.extend_from_slice(b"{\"torn");
    fs::write(&journal, &bytes).unwrap();

    let (r, committed) = recover_ok(dir.path());
    assert_eq!(committed, ["ok first", "ok after the bad ones"]);
    assert_eq!((r.journals, r.records), (1, 2));
    assert!(!journal.exists(), "the journal itself is gone");

    let kept = dir.path().join("quarantine").join("t-7-dead.jsonl");
    assert_eq!(
        fs::read(&kept).unwrap(),
        b"{\"bad\": [[[\n\xff\xfe not utf-8 \xc3\nbad with cr\r\n{\"torn\n",
        "each unreadable line, byte for byte, one per line"
    );
    assert_eq!(r.quarantined.len(), 1);
    let q = &r.quarantined[0];
    assert_eq!(
        (q.file.as_path(), q.journal.as_path()),
        (kept.as_path(), journal.as_path())
    );
    assert_eq!(q.records, 4);
    assert_eq!(q.problems.len(), 4);
    assert!(
        q.problems[0].starts_with("line 2: not a record"),
        "{:?}",
        q.problems
    );
    assert!(
        q.problems[1].starts_with("line 3: not UTF-8"),
        "{:?}",
        q.problems
    );
    assert!(q.problems[2].starts_with("line 6: "), "{:?}", q.problems);
    assert!(q.problems[3].contains("incomplete"), "{:?}", q.problems);
    let warnings = r.warnings();
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].starts_with("4 unreadable records of journal ")
            && warnings[0].contains(&kept.display().to_string()),
        "the warning names the quarantine file: {}",
        warnings[0]
    );
    assert_eq!(r.quarantined_records(), 4);
    let count = capability_journal::quarantined(dir.path(), Some("t")).unwrap();
    assert_eq!(count.records(), 4);
    assert_eq!(count.files.len(), 1);
    assert_eq!(count.files[0].path, kept);
}

#[cfg(unix)]
#[test]
fn quarantine_is_owner_only() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("t-1-dead.jsonl"), "secret input\n").unwrap();
    let (r, _) = recover_ok(dir.path());
    let q = &r.quarantined[0];
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&q.file), 0o600);
    assert_eq!(mode(&dir.path().join("quarantine")), 0o700);
}

#[test]
fn a_recovery_that_stopped_before_deleting_the_journal_does_not_quarantine_twice() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("t-8-dead.jsonl");
    let bytes = b"ok one\nunreadable\n";
    fs::write(&journal, bytes).unwrap();
    let (first, _) = recover_ok(dir.path());
    assert_eq!(first.quarantined_records(), 1);
    // The same journal again (as when the process recovering it died after keeping its
    // unreadable record but before deleting it), then a recovery with nothing to do.
    fs::write(&journal, bytes).unwrap();
    let (second, committed) = recover_ok(dir.path());
    assert_eq!(committed, ["ok one"], "replay is idempotent for the store");
    assert_eq!(second.quarantined[0].file, first.quarantined[0].file);
    let (third, _) = recover_ok(dir.path());
    assert_eq!(third, Recovery::default());
    let count = capability_journal::quarantined(dir.path(), None).unwrap();
    assert_eq!(count.records(), 1, "{count:?}");
    assert_eq!(count.files.len(), 1);
    assert_eq!(fs::read(&count.files[0].path).unwrap(), b"unreadable\n");
    assert_eq!(
        fs::read_dir(dir.path().join("quarantine")).unwrap().count(),
        1
    );
}

#[test]
fn another_journal_under_a_name_already_in_quarantine_is_kept_beside_it_not_over_it() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("t-9-dead.jsonl");
    fs::write(&journal, "first bad\n").unwrap();
    recover_ok(dir.path());
    fs::write(&journal, "second bad\n").unwrap();
    let (r, _) = recover_ok(dir.path());
    let q = dir.path().join("quarantine");
    assert_eq!(r.quarantined[0].file, q.join("t-9-dead.jsonl.1"));
    assert_eq!(fs::read(q.join("t-9-dead.jsonl")).unwrap(), b"first bad\n");
    assert_eq!(
        fs::read(q.join("t-9-dead.jsonl.1")).unwrap(),
        b"second bad\n"
    );
    assert_eq!(
        capability_journal::quarantined(dir.path(), Some("t"))
            .unwrap()
            .records(),
        2
    );
}

#[test]
fn a_journal_whose_unreadable_records_cannot_be_kept_is_not_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("t-10-dead.jsonl");
    fs::write(&journal, "ok good\nunreadable\n").unwrap();
    // The readable records cannot be committed: the journal stays, and nothing is kept yet
    // (the next recovery reads it all again).
    let r = recover(dir.path(), "t", ok_lines, |_| {
        Err::<(), &str>("database locked")
    });
    assert!(matches!(r, Err(RecoverError::Replay("database locked"))));
    assert!(journal.exists());
    assert!(!dir.path().join("quarantine").exists());
    // The quarantine cannot be made: a file stands where its directory would be.
    fs::write(dir.path().join("quarantine"), "in the way").unwrap();
    let r = recover(dir.path(), "t", ok_lines, |_| Ok::<(), String>(()));
    assert!(matches!(r, Err(RecoverError::Io(_))), "{r:?}");
    assert_eq!(fs::read(&journal).unwrap(), b"ok good\nunreadable\n");
    // Once it can be, the next recovery keeps the record and deletes the journal.
    fs::remove_file(dir.path().join("quarantine")).unwrap();
    let (r, committed) = recover_ok(dir.path());
    assert_eq!(committed, ["ok good"]);
    assert_eq!(r.quarantined_records(), 1);
    assert!(!journal.exists());
}

#[test]
fn the_count_is_per_prefix_and_skips_files_being_written() {
    let dir = tempfile::tempdir().unwrap();
    assert!(
        capability_journal::quarantined(dir.path(), None)
            .unwrap()
            .is_empty(),
        "no quarantine directory: nothing kept"
    );
    let q = quarantine::quarantine_dir(dir.path());
    fs::create_dir_all(&q).unwrap();
    fs::write(q.join("receipts-1-a.jsonl"), "x\ny\n").unwrap();
    fs::write(q.join("audit-1-b.jsonl"), "z\n").unwrap();
    fs::write(q.join("audit-1-b.jsonl.1"), "no newline").unwrap();
    fs::write(q.join(".audit-2-c.jsonl.tmp"), "staged\nstaged\n").unwrap();
    fs::create_dir(q.join("audit-sub")).unwrap();
    let count = |p| {
        capability_journal::quarantined(dir.path(), p)
            .unwrap()
            .records()
    };
    assert_eq!(count(Some("receipts")), 2);
    assert_eq!(count(Some("audit")), 2);
    assert_eq!(count(None), 4);
}

#[test]
fn nesting_is_measured_outside_strings() {
    assert_eq!(json_nesting(b"1"), 0);
    assert_eq!(json_nesting(b"[]"), 1);
    assert_eq!(json_nesting(br#"{"a":[{"b":[]}],"c":{}}"#), 4);
    assert_eq!(json_nesting(br#"{"s":"[[[[{{{{"}"#), 1);
    assert_eq!(json_nesting(br#"{"s":"\"[[[[\\","t":[[1]]}"#), 3);
    let deep = "[".repeat(500) + &"]".repeat(500);
    assert_eq!(json_nesting(deep.as_bytes()), 500);
}
