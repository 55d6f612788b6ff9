"""Where training samples come from, apart from what a model does with them.

A batch is any mapping, sequence or dataclass of tensors with a leading batch dimension
(data/batch.py); a source is a pure function of position (data/source.py). The sources:

* `SyntheticCriteo` (synthetic.py) needs no files. It draws Zipf-skewed ids (the access pattern
  that makes embedding tables interesting: a few hot rows, a long cold tail) and labels from a
  hidden "teacher" model, so a learner has a real signal to find and a known ceiling
  (`teacher_auc`). It is generated chunk by chunk from seeds, never materialised, so the full-size
  Criteo tables (10M rows) cost no memory.
* `CriteoTSV` reads the Criteo text format; `CriteoParquet` reads the same columns from Parquet
  (both in criteo.py).
* `TableSource` (table.py) reads a CSV or Parquet file of the user's own columns
  (`data.source: table`, `data.schema`): its own dense width, one table per categorical column.
* `TextSource` (text.py) reads the user's documents (`data.source: text`), tokenized by a BPE
  trained on them.

The file sources read a user's file, untrusted input, through files.py: a line over
`data.max_document_bytes` is refused by its number before it is read whole, and a .gz is inflated
as it is read. This package knows nothing of workloads.
"""
