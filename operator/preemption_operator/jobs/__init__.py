"""Job integrations: what turns a job object (batch/v1 Job first) into a Workload and back.

Importing the package registers every integration (framework.INTEGRATIONS)."""

from . import batch_job as batch_job
