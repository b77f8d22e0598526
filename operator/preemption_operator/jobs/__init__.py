"""Job integrations: what turns a job object (batch/v1 Job first) into a Workload and back."""
