-- pgvector holds every embedding the service stores (memories, history recall).
CREATE EXTENSION IF NOT EXISTS vector;
